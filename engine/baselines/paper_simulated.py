"""SIMULATED answers to the prompts of the paper's five memory baselines (a test harness, not a model).

Each module's ``simulated_reply(messages)`` recognises its own rendered prompts and answers with its
rule (the same function ``mode = "rule"`` applies to the payload); any other prompt: ``None``.

=====================  ==============================================================================
HippoRAG 2 NER         ``{"named_entities": [...]}``: capitalised phrases and numbers of the passage
HippoRAG 2 triples     ``{"triples": [[a, "appears with", b], ...]}`` over consecutive entities
MemoryOS multi-summary one theme: 3 most frequent content words, the first sentence of the answers
A-MEM analysis         3 keywords (= tags), the first sentence as context
A-MEM evolution        strengthen links to neighbours sharing a keyword
LightMem extraction    ``{"data": [{source_id, fact}]}``: each message as written
LightMem update        delete when a newer candidate has the same text, else ignore
LangMem manager        ``{"operations": [insert ...]}`` for each message not stored verbatim (re-impl.)
LangMem library        the library's manager prompt (trustcall's tools in the system message): one
                       ``Memory`` tool call per session message not stored verbatim (langmem_library)
=====================  ==============================================================================
"""

from __future__ import annotations

from typing import Sequence

from engine.baselines import amem, hipporag, langmem, langmem_library, lightmem, memoryos


def simulated_reply(messages: Sequence[dict]) -> str | None:
    """A simulated answer to one of the five memories' prompts, or None for any other prompt."""
    for module in (hipporag, memoryos, amem, lightmem, langmem, langmem_library):
        text = module.simulated_reply(list(messages))
        if text is not None:
            return text
    return None
