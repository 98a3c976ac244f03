"""FLEX (seed 002, arXiv:2511.06449): continuous agent evolution through a structured experience library.

* :mod:`engine.flex.memory`: the method (record, retrieval, reflection, augmentation, pitfall defences),
  on the round contract every memory follows (:mod:`engine.baselines.common`);
* :mod:`engine.flex.library`: the library on disk (append-only JSONL, fsynced, torn-line checks, archive);
* :mod:`engine.flex.tfidf`: the seed's TF-IDF retrieval arithmetic;
* :mod:`engine.flex.tracking`: success rate over a window, plateau detection, the plot;
* ``toe flex show|stats|prune LIBRARY``: :mod:`engine.cli.flex`.
"""
