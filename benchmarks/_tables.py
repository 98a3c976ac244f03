"""Tables of the benchmarks' measured figures, rendered from ``benchmarks/results/<topic>.json``.

Each renderer takes one topic's JSON (written by :func:`benchmarks._results.record`) and returns the
table's lines; ``scripts/doc_tables.py`` registers them next to the run tables and puts each one,
with the commands, machines and dates of the runs it used, between its markers. ``speed`` (the
README's summary) takes every topic.
"""

from __future__ import annotations

import statistics

from engine.markdown import table


def latest(data: dict, key: str) -> dict:
    """Figures of the last recorded run under ``key``."""
    return runs(data, key)[-1]["figures"]


def runs(data: dict, key: str) -> list[dict]:
    try:
        out = data["runs"][key]
    except KeyError:
        raise KeyError(f"benchmarks/results/{data.get('topic')}.json has no run {key!r}; "
                       f"it has {sorted(data.get('runs', {}))}") from None
    if not out:
        raise KeyError(f"benchmarks/results/{data.get('topic')}.json: run {key!r} is empty")
    return out


def _rate(v: float) -> str:
    return f"{v / 1e6:.1f} M" if v >= 1e6 else f"{v / 1e6:.2f} M" if v >= 1e4 else f"{v:,.0f}"


def _pow10(n: int) -> str:
    k = len(str(n)) - 1
    return f"10^{k}" if n == 10**k else f"{n:,}"


def _x(v: float) -> str:
    """A ratio as the docs quote it: 2 decimals under 10, none above."""
    return f"{v:.2f}x" if v < 10 else f"{v:,.0f}x"


# --- experience store -------------------------------------------------------------------------------

def store_update(data: dict) -> list[str]:
    f = latest(data, "n=10000000")
    u, r, t, sub = f["updates_per_s"], f["ratios"], f["targets"], f["subsets"]
    lines = table(["variant", "updates/s", "ratio of formula kernel"], [
        ["formula kernel, ToE eq. (9)/(A6) (`kernels.reliability.formula_update`)", _rate(u["formula"]), 1],
        ["same through `ExperienceStore.update` (batch validated at the boundary)", _rate(u["store.update"]), "-"],
        ["Numba random scatter-add `Q[e] += v`, same rows (issue's \"practical limit\")", _rate(u["scatter_add"]),
         f"**{_x(r['vs_scatter_add'])}** (target >= {t['vs_scatter_add']:g}x)"],
        ["Numba scatter-add with the same software prefetch", _rate(u["scatter_add_prefetch"]),
         f"{r['vs_scatter_add_prefetch']:.2f}x"],
        [f"plain-Python dict-of-rows loop ({sub['python_rows']:,} rows, {sub['python_updates']:,} updates, scaled "
         "per update)", _rate(u["python_dict"]), f"**{_x(r['vs_python'])}** (target >= {t['vs_python']:g}x)"],
        [f"pandas path table, `.loc` row lookup + write-back ({sub['pandas_rows']:,} rows, {sub['pandas_updates']:,} "
         "updates, scaled)", _rate(u["pandas"]), f"**{_x(r['vs_pandas'])}** (target >= {t['vs_pandas']:g}x)"],
    ], align="lrr")
    lines += ["",
              f"`ExperienceStore.update` (validation included: finiteness of the rewards, eid range, shapes) reaches "
             f"{r['store.update_vs_scatter_add']:.2f}x the plain scatter-add and "
             f"{r['vs_python'] * u['store.update'] / u['formula']:.0f}x the Python loop. Building the "
             f"{_pow10(f['n_experiences'])}-path store with `add_key_paths` took {f['build_s_wall']:.0f} s wall."]
    if "store.update_vs_kernel" in r:
        lines += ["", f"The checked door against the unchecked kernel: `store.update` runs at "
                  f"**{r['store.update_vs_kernel']:.2f}x** the kernel's speed and "
                  f"**{r['store.update_vs_reference']:.2f}x** the independent aligned, prefetched reference loop "
                  f"(benchmarks/_store_reference.py; target >= 0.9x), which itself runs at "
                  f"{1 / r['kernel_vs_reference']:.2f}x the kernel's speed."]
        if "batch_read_s" in r:
            lines[-1] += (f" The checks (eid range, rewards' exponent bits) cost {r['checks_s'] * 1e3:.1f} ms a batch "
                          f"where one sequential read of the same 32 MB costs {r['batch_read_s'] * 1e3:.1f} ms: a "
                          "batch that must be validated before its first write (a failed batch changes nothing) "
                          "cannot be checked for less than that read, so the remaining gap to the kernel is the "
                          "memory bandwidth of one pass.")
    if "bytes_per_experience" in f["memory"]:
        b = f["memory"]["bytes_per_experience"]
        parts = [[k, f"{v:.1f}"] for k, v in b.items() if k not in ("total", "raw_q_and_hits", "total_over_raw_q_and_hits")]
        total = ["**total**", f"**{b['total']:.1f}** ({b['total_over_raw_q_and_hits']:.1f}x the "
                              f"{b['raw_q_and_hits']} bytes of raw Q and hits)"]
        lines += ["", *table(["part", "bytes per experience"], parts + [total], align="lr")]
    return lines


def store_memory(data: dict) -> list[str]:
    f = latest(data, "n=10000000")
    mem = f["memory"]
    raw = mem["raw_column_bytes"]
    peak = round(mem["peak_over_raw"] * raw)
    return table(["quantity", "bytes", "ratio"], [
        ["raw column bytes: every declared column, used rows, logical dtypes (experience Q 3 x f8, hit, recall, "
         "path 3 x i8, created; node: 9 int64 columns + text)", f"{raw:,}", 1],
        ["store allocated (packed block, columns, node columns, (parent, key) hash table)",
         f"{mem['allocated_bytes']:,}", f"{mem['allocated_bytes'] / raw:.2f}x"],
        ["peak during an update batch: store + batch inputs + validation temporaries (tracemalloc: "
         f"{mem['update_peak_traced_bytes'] / 1e6:.1f} MB)", f"{peak:,}",
         f"**{mem['peak_over_raw']:.2f}x** (target <= {f['targets']['memory']:g}x)"],
        [f"experience part only: allocated {mem['allocated_experience_bytes']:,} vs raw {mem['raw_experience_bytes']:,}",
         "", f"{mem['experiences_allocated_over_raw']:.2f}x"],
        ["against only what a checkpoint persists (experience columns; node parent, depth, key, text: "
         f"{mem['raw_persisted_bytes']:,} bytes)", "", f"{mem['peak_over_raw_persisted']:.2f}x"],
        ["process max RSS (interpreter, numba, pandas, the Python/pandas reference tables included)",
         f"{mem['process_maxrss_bytes']:,}", "-"],
    ], align="lrr")


def store_summary(data: dict) -> list[str]:
    """docs/store.md: the headline ratios of the store benchmark, each with its target."""
    f = latest(data, "n=10000000")
    u, r, t = f["updates_per_s"], f["ratios"], f["targets"]
    return table(["measured", "figure", "target"], [
        [f"formula kernel, {_pow10(f['n_experiences'])} experiences, {f['horizons']} horizons, {_pow10(f['updates'])} "
         "random updates", f"{u['formula'] / 1e6:.1f} M updates/s", "-"],
        ["vs a plain Numba random scatter-add over the same rows", f"**{_x(r['vs_scatter_add'])}** "
         f"({r['vs_scatter_add_prefetch']:.2f}x one given the same software prefetch)", f">= {t['vs_scatter_add']:g}x"],
        ["vs a plain-Python dict-of-rows loop", f"**{_x(r['vs_python'])}**", f">= {t['vs_python']:g}x"],
        ["vs a pandas `.loc` path table", f"**{_x(r['vs_pandas'])}**", f">= {t['vs_pandas']:g}x"],
        ["peak memory during an update batch / raw bytes of all declared columns", f"**{f['memory']['peak_over_raw']:.2f}x** "
         f"({f['memory']['peak_over_raw_persisted']:.2f}x against only what a checkpoint stores)", f"<= {t['memory']:g}x"],
    ])


# --- Game of 24 core --------------------------------------------------------------------------------

_G24_DOOR = ("public `state_keys` on {states} states held as Fraction tuples",
             "`hash(tuple(sorted(state)))` on the same tuples")

_G24 = {
    "hash": ("canonical hashing, {states} random states (1-4 rationals, unreduced, any order)",
             "`hash(tuple(sorted(Fraction ...)))` on {subset:,} states, x{scale}"),
    "solve_all": ("solve all 1,820 multisets (solvability + one solution's steps, fresh memo each round)",
                  "exact Fraction search memoised over canonical states, the same algorithm"),
    "precompute": ("full precomputation, 1,362 ToT puzzles (all 3- and 2-number states, edges, flags, one verified "
                   "suffix each; fresh memo)", "the same in pure Python"),
}


def _ms(s: float) -> str:
    return f"{s * 1e3:.0f} ms" if s >= 0.1 else f"{s * 1e3:.1f} ms"


def ratio_range(data: dict, key: str) -> str:
    vals = [r["figures"]["ratio"] for r in runs(data, key)]
    lo, hi = min(vals), max(vals)
    return f"{lo:.0f}x" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}x"


def _g24_row(what: str, ref: str, f: dict) -> list[str]:
    return [what, _ms(f["compiled_s"]), f"{f['reference_s']:.2f} s ({ref})", f"**{f['ratio']:.0f}x**",
            f">= {f['target']:.0f}x", f"{f['first_call_s']:.1f} s"]


def game24_core(data: dict) -> list[str]:
    rows = []
    for key, (what, ref) in _G24.items():
        f = latest(data, key)
        states = scale = ""
        if key == "hash":
            states, scale = _pow10(f["states"]), f["states"] // f["reference_subset"]
        rows.append(_g24_row(what.format(states=states), ref.format(subset=f.get("reference_subset", 0), scale=scale), f))
    if runs(data, "state_keys"):
        f = latest(data, "state_keys")
        rows.append(_g24_row(_G24_DOOR[0].format(states=format(f["states"], ",")), _G24_DOOR[1], f))
    lines = table(["hot path", "compiled (median)", "pure-Python reference", "ratio", "target", "first call (JIT compile)"],
                  rows)
    s, p = latest(data, "solve_all"), latest(data, "precompute")
    earlier = [" / ".join(f"{runs(data, k)[i]['figures']['ratio']:.0f}x" for k in _G24)
               for i in range(min(len(runs(data, k)) for k in _G24) - 1)]
    lines += ["",
              "* Solve-all against a per-puzzle search without a shared memo (what a script that solves one puzzle "
              f"at a time does; measured on every 10th multiset, x10): {s['unshared_reference_s']:.1f} s, "
              f"**{s['ratio_vs_unshared_search']:.0f}x**."]
    if "public_cold_over_warm" in s:
        line = (f"* The public `solve_steps_many` on the 1,820 multisets: {_ms(s['public_cold_s'])} with the process "
                f"memo emptied, {_ms(s['public_warm_s'])} with it kept: cold/warm **{s['public_cold_over_warm']:.2f}x** "
                "(target <= 2x).")
        if "public_unseeded_s" in s:
            line += (" A fresh process memo starts from the shipped seed (every state the search of the 1,820 puzzles "
                     "memoises, engine/data/game24/solver_memo.npz, checked against a fresh build by the tests); "
                     f"from an empty memo the same call takes {_ms(s['public_unseeded_s'])}.")
        else:
            line += " The warm pass is the Fractions of the steps being built."
        lines.append(line)
    if runs(data, "state_keys"):
        f = latest(data, "state_keys")
        lines.append(f"* `state_keys`: reading the numbers out of the objects (one compiled pass over the CPython "
                     f"objects, kernels/pyobj.py) is {f['reading_fractions_share']:.0%} of its time; the canonical "
                     "kernel is the rest.")
    if earlier:
        lines.append("* Earlier runs of the same command (hashing / solve-all / precompute): " + "; ".join(earlier)
                     + ". Ranges over all recorded runs: hashing " + ratio_range(data, "hash") + ", solve-all "
                     + ratio_range(data, "solve_all") + ", precompute " + ratio_range(data, "precompute") + ".")
    st, sv = p["states"], p.get("solvable", {})
    lines.append(f"* Precomputed counts ({st['4']:,} puzzles): "
                 + "; ".join(f"level {n}: {st[n]:,} states" + (f", {sv[n]:,} solvable" if n in sv else "")
                             for n in ("4", "3", "2"))
                 + f"; {p['experiences']:,} verified suffixes. Writing the Arrow tables (`to_tables`, not timed): "
                 f"{p['to_tables_s']:.1f} s wall.")
    return lines


# --- LLM interface ----------------------------------------------------------------------------------

def llm_overhead(data: dict) -> list[str]:
    rs = [r["figures"] for r in runs(data, "overhead")[-3:]]
    rows = [["policy (`policy.complete` on every sample)", *(f"{f['policy_s'] * 1e3:.1f} ms" for f in rs)],
            ["token counting (prompt + completions)", *(f"{f['counting_s'] * 1e3:.2f} ms" for f in rs)],
            ["`MeteredBackend(simulated backend).generate`, outputs looked up",
             *(f"{f['lookup_generate_s'] * 1e3:.2f} ms" for f in rs)],
            ["interface machinery (= looked-up run - counting)",
             *(f"{f['machinery_s'] * 1e3:.2f} ms ({f['machinery_us_per_request']:.1f} µs/req)" for f in rs)],
            ["**overhead: machinery / (policy + counting)**", *(f"**{f['overhead'] * 100:.2f} %**" for f in rs)],
            ["overhead with token counting charged to the interface",
             *(f"{f['overhead_with_counting'] * 100:.2f} %" for f in rs)]]
    return table(["", *(f"run {i + 1}" for i in range(len(rs)))], rows) + [
        "", f"SIMULATED policy; {rs[-1]['requests']} requests / {rs[-1]['samples']} samples per repetition."]


def llm_local(data: dict) -> list[str]:
    rows = []
    for key in sorted(k for k in data["runs"] if k.startswith("local,")):
        run = runs(data, key)[-1]
        f, load = run["figures"], _load(run["machine"])
        rows += [[f["threads"], slots, s["tokens"], f"{s['wall_s']:.1f} s", f"**{s['tokens_per_s']:.1f}**", load]
                 for slots, s in sorted(f["slots"].items(), key=lambda kv: int(kv[0]))]
        rows.append(["", "**4 / 1**", "", "", f"**{f['ratio_4_vs_1']:.2f}x**", ""])
    return table(["threads", "parallel slots", "tokens", "wall", "tokens/s", "load avg"], rows)


def llm_client(data: dict) -> list[str]:
    f = runs(data, "client")[-1]["figures"]
    names = (("urllib_threads", "urllib, thread per request (before)"), ("engine_http", "`engine.http` (pooled async)"),
             ("openai_backend", "`OpenAIBackend.generate`"))
    rows = []
    for k in sorted(f["levels"], key=int):
        row = f["levels"][k]
        cpu = ", ".join(f"{row[key]['client_cpu_ms_per_request']:.2f} ({row[key]['server_cpu_ms_per_request']:.2f})"
                        for key, _ in names)
        rows.append([k, f"{row['ideal_rps']:.0f}", *(f"{row[key]['rps']:.0f} ({row[key]['of_ideal']:.0%})" for key, _ in names),
                     cpu])
    lines = table(["in flight K", "ideal K / delay", *(n for _, n in names), "CPU ms / request, client (server)"], rows,
                  align="rr" + "r" * len(names) + "l")
    lines += ["", f"Requests/s (share of the ideal), best of {f['repeat']} passes of 10 K requests each against a loopback "
              f"server answering after {f['delay_s'] * 1e3:.0f} ms; CPU in the order of the columns."]
    return lines


def _load(machine: dict) -> str:
    if "load_average" in machine:
        return str(machine["load_average"])
    la = machine.get("load_average_1_5_15")
    return f"{la[0]:.1f}" if la else "-"


# --- node index -------------------------------------------------------------------------------------

def _num(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def index_table(key: str):
    def render(data: dict) -> list[str]:
        f = latest(data, key)
        lines = table(["method", "build vec/s", "p50 ms", "p99 ms", "batch q/s", "recall@8", "p50 x numpy", "batch x numpy"],
                      [[r["method"], _num(r["build_vec_per_s"], ",.0f"), f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}",
                        f"{r['batch_q_per_s']:,.0f}", f"{r['recall']:.4f}", f"{r['p50_x_numpy']:.1f}",
                        f"{r['batch_x_numpy']:.1f}"] for r in f["rows"]])
        lines += ["", "ef sweep (NodeIndex, p50 / recall@8): "
                  + "; ".join(f"ef={e} {p:.3f} ms / {r:.4f}" for e, p, r in f["ef_sweep"]) + "."]
        return lines

    render.__doc__ = f"benchmarks/results/index.md: every method at {key}."
    return render


def _xs(v: float) -> str:
    return f"{v:.1f}" if v < 10 else f"{v:.0f}"


def _node_index(f: dict) -> dict:
    return next(r for r in f["rows"] if r["method"].startswith("NodeIndex (M="))


INDEX_KEYS = ["n=10000,dim=384", "n=100000,dim=384", "n=1000000,dim=64"]


# --- finance ToE retrieval under one prefix (benchmarks/test_finance_retrieval.py) ---------------------

RETRIEVAL_KEYS = ["n=1000,dim=384", "n=100000,dim=384", "n=1000000,dim=384"]


def _p50_p99(d: dict) -> str:
    return f"{d['p50_ms']:.3f} / {d['p99_ms']:.2f}"


def finance_retrieval(data: dict) -> list[str]:
    """benchmarks/results/finance_retrieval.md: brute force vs node index at 10^3, 10^5, 10^6 directions."""
    rows, sweeps = [], []
    for key in RETRIEVAL_KEYS:
        f = latest(data, key)
        bf, ix = f["brute_force"], f["node_index"]
        rows.append([_pow10(f["n"]), _p50_p99(bf), _p50_p99(ix), f"{ix['recall@8']:.4f}", _x(bf["p50_ms"] / ix["p50_ms"]),
                     f"{f['product_only']['p50_ms']:.3f}", f"{f['index_build_s']:.1f} s",
                     f"{f['load_before_timing'][0]:.1f} / {f['load_after'][0]:.1f}"])
        sweeps.append(f"{_pow10(f['n'])}: " + ", ".join(f"ef={r['ef']} {r['p50_ms']:.3f} ms / {r['recall@8']:.4f}"
                                                        for r in f["ef_sweep"]))
    lines = table(["directions under the prefix", "brute force p50 / p99 ms", "node index p50 / p99 ms", "recall@8",
                   "p50 speed-up", "brute-force rule on a held matrix, p50 ms", "index build (2 threads)",
                   "load (1 min) before / after timing"], rows)
    f = latest(data, RETRIEVAL_KEYS[-1])
    lines += ["", f"Node index: M={f['M']}, ef_construction={f['ef_construction']}, ef_search={f['ef_search']} "
              f"(`toe.index_ef`), {f['fetch']} candidates re-ranked exactly; brute force timed over "
              f"{f['queries_brute_force']} queries at the largest size, the node index over {f['queries_index']}.",
              "", "Query beam sweep on the same graphs (p50 / recall@8): " + "; ".join(sweeps) + "."]
    return lines


def finance_retrieval_crossover(data: dict) -> list[str]:
    """benchmarks/results/finance_retrieval.md: p50 per prefix size; where the node index starts to win."""
    f = latest(data, "crossover")
    lines = table(["directions under the prefix", "brute force p50 ms", "node index p50 ms", "recall@8", "load (1 min)"],
                  [[f"{r['n']:,}", f"{r['brute_force_p50_ms']:.3f}", f"{r['node_index_p50_ms']:.3f}", f"{r['recall@8']:.4f}",
                    f"{r['load'][0]:.1f}"] for r in f["rows"]])
    won = [r["node_index_p50_ms"] < r["brute_force_p50_ms"] for r in f["rows"]]
    first = next((r["n"] for i, r in enumerate(f["rows"]) if all(won[i:])), None)
    lines += ["", f"The node index is faster from {first:,} directions on (every larger size measured)."
              if first else "The node index was not faster at any size measured."]
    return lines


def finance_retrieval_filter(data: dict) -> list[str]:
    """benchmarks/results/finance_retrieval.md: one index per prefix vs one shared index with a filter."""
    f = latest(data, "filter-vs-prefix,n=100000")
    return table([f"search ({f['prefix_rows']:,}-direction prefix of {f['n']:,})", "p50 ms", "p99 ms", "recall@8"],
                 [[w["way"], f"{w['p50_ms']:.3f}", f"{w['p99_ms']:.2f}", f"{w['recall@8']:.4f}"] for w in f["ways"]])


def finance_retrieval_summary(data: dict) -> list[str]:
    """docs/retrieval.md: finance per-news-item retrieval, exact product vs node index."""
    rows = []
    for key in RETRIEVAL_KEYS:
        f = latest(data, key)
        bf = f["brute_force"]["p50_ms"]
        rows.append([_pow10(f["n"]), f"{bf / 1e3:.1f} s" if bf >= 1e3 else f"{bf:.2f} ms",
                     f"{f['node_index']['p50_ms']:.2f} ms", f"{f['node_index']['recall@8']:.3f}"])
    return table(["directions under one prefix", "exact product p50", "node index p50", "recall@8"], rows)


def index_summary(data: dict) -> list[str]:
    """docs/retrieval.md: NodeIndex at every size against brute force and faiss HNSW."""
    rows = []
    for key in INDEX_KEYS:  # the documented workloads (a smoke run with TOE_BENCH_SIZES adds other keys)
        f = latest(data, key)
        ni = _node_index(f)
        fh = next((r for r in f["rows"] if r["method"].startswith("faiss IndexHNSW")), None)
        p99 = f" (p99 {ni['p99_ms']:.2f})" if f["n"] >= 100_000 else ""
        rows.append([f"{_pow10(f['n'])}, {f['dim']}", f"{ni['p50_ms']:.2f} ms{p99}", f"{ni['recall']:.3f}",
                     f"{_xs(ni['p50_x_numpy'])}x / {_xs(ni['batch_x_numpy'])}x",
                     f"{fh['p50_ms']:.2f} ms, {fh['recall']:.3f}" if fh else "not built"])
    return table(["nodes, dim", "NodeIndex p50", "recall@8", "vs NumPy brute force (per query / batched)",
                  "faiss HNSW p50, recall@8"], rows)


# --- executors (Ray) --------------------------------------------------------------------------------

def cluster_loaded(data: dict) -> list[str]:
    f = latest(data, "2026-11-29,loaded,warm-100x20")
    return _executor_rows(f)


def _executor_rows(f: dict) -> list[str]:
    ex = f["executors"]
    ref = ex["local-1"]["episodes_per_s"]
    return table(["executor", "episodes/s", "x local", "round s", "round overhead s", "barrier apply s (driver)",
                  "store apply s (owner)", "per worker: episodes, episodes/s while busy, CPU share (cpu_s/busy_s), LLM calls"],
                 [[name, f"{e['episodes_per_s']:.2f}", f"{e['episodes_per_s'] / ref:.2f}", f"{e['round_s']:.3f}",
                   f"{e['round_overhead_s']:.4f}", f"{e['barrier_apply_s']:.4f}", f"{e['store_apply_s']:.4f}",
                   "; ".join(f"{w[0]}: {w[1]}, {w[2]:.1f}, {w[3]:.2f}, {w[4]}" for w in e["workers"])]
                  for name, e in ex.items()])


def _busy(e: dict) -> str:
    return ", ".join(f"{b:.1f}" for b in e["busy"])


def cluster_idle(data: dict) -> list[str]:
    rows = []
    for run in runs(data, "2026-11-29,idle,warm"):
        f = run["figures"]
        ex = f["executors"]
        ref = ex["local-1"]["episodes_per_s"]
        r1, r2 = ex["ray-1"]["episodes_per_s"], ex["ray-2"]["episodes_per_s"]
        rows.append([f"{f['episodes']} episodes, rounds of {f['round']}", f"{ref:.1f}", f"{r1:.1f} ({r1 / ref:.2f}x)",
                     f"{r2:.1f} ({r2 / ref:.2f}x)", f"{_busy(ex['local-1'])} / {_busy(ex['ray-1'])} / {_busy(ex['ray-2'])}"])
    return table(["workload", "local-1 eps/s", "ray-1 (x local)", "ray-2 (x local)",
                  "per-worker busy eps/s: local / ray-1 / ray-2 workers"], rows)


def cluster_cold(data: dict) -> list[str]:
    f = latest(data, "2026-11-29,idle,cold-300x60")
    ex = f["executors"]
    ref = ex["local-1"]["episodes_per_s"]
    rows = []
    for name, e in ex.items():
        x = f"{e['episodes_per_s'] / ref:.2f}"
        rows.append([name, f"{e['episodes_per_s']:.1f}", f"**{x}**" if name == "ray-2" else x, _busy(e)])
    return table(["executor", "episodes/s", "x local", "per-worker busy episodes/s"], rows)


def cluster_shares(data: dict) -> list[str]:
    rows = []
    for i, run in enumerate(runs(data, "2026-11-30,shares,cold-300x60"), 1):
        f = run["figures"]
        ex = f["executors"]
        ref = ex["local-1"]["episodes_per_s"]
        r1, r2 = ex["ray-1"]["episodes_per_s"], ex["ray-2"]["episodes_per_s"]
        rows.append([i, f["chunks_per_worker"], f"{ref:.1f}", f"{r1:.1f} ({r1 / ref:.2f}x)", f"{r2:.1f} (**{r2 / ref:.2f}x**)",
                     ", ".join(f"{p:.2f}" for p in f["ray2_over_local_per_pass"])])
    return table(["run", "shares per worker", "local-1 eps/s", "ray-1 (x local)", "ray-2 (x local)", "ray-2 / local per pass"],
                 rows)


def _ray2(data: dict, key: str) -> list[dict]:
    return [r["figures"] for r in runs(data, key)]


def _default_command(f: dict) -> bool:
    """A run of the benchmark's defaults (warm, 100 episodes, rounds of 20, best of 4 passes, one share each)."""
    return (f["episodes"], f["round"], f["repeats"], f.get("chunks_per_worker", 1)) == (100, 20, 4, 1)


def _on_replicas(f: dict) -> bool:
    """Whether a run's ray-2 used replica mode (``[cluster] replicas``; recorded from 2026-12-02 07:00 on)."""
    return bool(f["executors"]["ray-2"].get("replicas", False))


def cluster_speedup(data: dict) -> list[str]:
    """The current figure: ray-2 / local over every recorded run of the cold and warm 300 x 60 workloads
    and of the benchmark's default command."""
    rows = []
    for key, what, replicas in (
            ("cold-300x60", "cold replay, {n} x {e} new episodes per run", False),
            ("warm-300x60", "warm rerun of {e} episodes, best of {n} passes", False),
            ("warm-100x20", "default command, store owners: warm rerun of {e} episodes in rounds of 20, best of {n} passes",
             False),
            ("warm-100x20", "**default command**, replica mode (the executor's default since 2026-12-02 07:00)", True)):
        fs = [f for f in _ray2(data, key) if key != "warm-100x20" or (_default_command(f) and _on_replicas(f) is replicas)]
        cells = "; ".join(f"{f['ray2_over_local']:.2f} (" + ", ".join(f"{p:.2f}" for p in f["ray2_over_local_per_pass"]) + ")"
                          for f in fs)
        med = statistics.median(f["ray2_over_local"] for f in fs)
        rows.append([what.format(n=fs[-1]["repeats"], e=fs[-1]["episodes"]), cells, f"**{med:.2f}x**"])
    return table(["mode", "runs: ray-2 / local (per-pass ratios)", "median"], rows)


def cluster_recheck(data: dict) -> list[str]:
    """The latest re-measurement of the cold 300 x 60 workload (on whatever load the machine had), per run."""
    key = RECHECK_KEY
    fs = runs(data, key)
    rows = [[r["date"][11:16], ", ".join(f"{x:.1f}" for x in r["machine"]["load_average_1_5_15"]),
             f"{r['figures']['ray2_over_local']:.2f} (" + ", ".join(f"{p:.2f}" for p in r["figures"]["ray2_over_local_per_pass"])
             + ")"] for r in fs]
    med = statistics.median(r["figures"]["ray2_over_local"] for r in fs)
    return table(["run (UTC)", "load average before (1, 5, 15 min)", "ray-2 / local (per-pass ratios)"],
                 rows + [[f"**median of {len(fs)}**", "", f"**{med:.2f}x**"]])


RECHECK_KEY = "2026-12-01,loaded,cold-300x60"


def _with_bare(run: dict) -> bool:
    return "bare" in run["figures"] and _default_command(run["figures"])


def cluster_ceiling(data: dict) -> list[str]:
    """The default command's runs that also timed two bare processes (benchmarks/_bare.py), per run, with medians.

    Every ratio of a row is over ``bare-1`` (one spawned process on the same rounds, no executor), so
    ray-2 is read against the same reference as the bare pair: ``ray-2 / bare-1 = ray-2 / local-1 x
    local-1 wall / bare-1 wall`` (best passes)."""
    rows = [r for r in runs(data, "warm-100x20") if _with_bare(r)]
    cols = {"ray-2 / local-1": [], "ray-2": [], "bare-2,barrier": [], "bare-2": [], "local-1 wall / bare-1 wall": []}
    body = []
    for r in rows:
        f, b = r["figures"], r["figures"]["bare"]
        vals = [f["ray2_over_local"], f["ray2_over_local"] / b["local_over_bare1"], b["over_bare1"]["bare-2,barrier"],
                b["over_bare1"]["bare-2"], b["local_over_bare1"]]
        for col, v in zip(cols.values(), vals):
            col.append(v)
        busy = (", ".join(f"{x:.1f}" for x in f["executors"]["ray-2"]["busy"]) + " / "
                + ", ".join(f"{x:.1f}" for x in b["bare2_busy"])) if "bare2_busy" in b else "(not recorded)"
        body.append([f"{r['date'][:10]} {r['date'][11:16]}", "replicas" if _on_replicas(f) else "store owners",
                     f"{r['machine']['load_average_1_5_15'][0]:.1f}", *(f"{v:.2f}" for v in vals), busy])
    for replicas, what in ((False, "store owners"), (True, "replicas")):
        idx = [i for i, r in enumerate(rows) if _on_replicas(r["figures"]) is replicas]
        if idx:
            body.append([f"**median of {len(idx)}**", what, "",
                         *(f"**{statistics.median(c[i] for i in idx):.2f}**" for c in cols.values()), ""])
    return table(["run (UTC)", "ray-2 path", "load average before", "ray-2 / local-1 (the benchmark's figure)",
                  "over one bare process: ray-2", "two bare processes, a barrier per round",
                  "two bare processes, no barrier (the ceiling)", "local-1 wall / bare-1 wall",
                  "episodes/s while busy: ray-2's workers / bare-2's processes"], body)


cluster_ceiling.uses = _with_bare  # the runs the footer names


# --- finance ----------------------------------------------------------------------------------------

def finance_methods(data: dict) -> list[str]:
    f = latest(data, "methods,days=60")
    m = f["methods"]
    base = m["Pipe"]["mean_s"]
    lines = table(["Method", f"mean wall ({f['days']} days)", "median", "ratio to Pipe (mean)"],
                  [[name, f"{v['mean_s'] * 1e3:,.0f} ms", f"{v['median_s'] * 1e3:,.0f} ms", f"{v['mean_s'] / base:.2f}x"]
                   for name, v in m.items()])
    new = next((v for k, v in m.items() if k.startswith("Pipe+ToE (round loop")), None)
    old = m.get("Pipe+ToE (day-by-day reference)")  # runs before issue 34 timed the copied reference too
    if new is None or old is None:
        return lines
    d = f["days"]
    lines += ["", f"Pipe+ToE per trading day, round loop / reference: **{new['mean_s'] / old['mean_s']:.2f}x on the means "
                  f"({new['mean_s'] * 1e3 / d:.1f} vs {old['mean_s'] * 1e3 / d:.1f} ms), "
                  f"{new['median_s'] / old['median_s']:.2f}x on the medians** (SIMULATED policy)."]
    return lines


def finance_interleaved(data: dict) -> list[str]:
    f = latest(data, "interleaved,days=60")
    return table(["Pipe+ToE, round loop / day-by-day reference, 5 interleaved pairs", "min", "median of pairs"],
                 [["CPU time", f"{f['cpu_ratio_min']:.2f}x", f"{f['cpu_ratio_median']:.2f}x"],
                  ["wall time", f"{f['wall_ratio_min']:.2f}x", f"{f['wall_ratio_median']:.2f}x"]]) + [
        "", f"Fastest trading day: {f['new_ms_per_day']:.2f} vs {f['old_ms_per_day']:.2f} ms (SIMULATED policy)."]


def finance_mem0_store(data: dict) -> list[str]:
    """Pipe+Mem0's store variants (benchmarks/test_mem0_store.py), one block per recorded day count."""
    rows = []
    for key in KEYS["bench-finance-mem0-store-table"]:
        f = latest(data, key)
        rows += [[f"{name}, {f['days']}", f"{v['memories']:,}", f"{v['cpu_min_s']:.1f} s", f"{v['cpu_min_over_arrays']:.2f}x",
                  f"{v['wall_min_s']:.1f} s", f"{v['wall_min_over_arrays']:.2f}x"] for name, v in f["variants"].items()]
    return table(["Pipe+Mem0 store, days", "memories", "CPU min", "CPU / arrays", "wall min", "wall / arrays"], rows,
                 align="lrrrrr") + ["", "One seed, SIMULATED policy; min over the alternated repeats."]


def finance_instructions(data: dict) -> list[str]:
    f = latest(data, "instructions,days=60")
    return table(["Pipe+ToE, one pass of 60 days", "machine instructions", "ratio"],
                 [["day-by-day reference", f"{f['old_instructions'] / 1e9:.3f} G", "1.000x"],
                  ["round loop (ExperienceStore + FeedbackLedger)", f"{f['new_instructions'] / 1e9:.3f} G",
                   f"**{f['ratio']:.3f}x**"]], align="lrr") + [
        "", "Counted by valgrind's callgrind, PYTHONHASHSEED=0 (SIMULATED policy)."]


# --- sandbox ----------------------------------------------------------------------------------------

def sandbox(data: dict) -> list[str]:
    fs = {key: runs(data, key)[-1]["figures"] for key in data["runs"]}
    return table(["sandbox", "median wall time per call", "ratio to a bare interpreter start"],
                 [[f.get("variant", key), f"{f['sandboxed_s'] * 1e3:.0f} ms", f"{f['ratio']:.2f}x"] for key, f in fs.items()],
                 align="lrr")


# --- README: one line per hot path ------------------------------------------------------------------

def speed(topics: dict[str, dict]) -> list[str]:
    """README: the headline figure of every suite, with its target."""
    st, g, ix, llm, cl = (topics[k] for k in ("store", "game24_core", "index", "llm", "cluster"))
    f = latest(st, "n=10000000")
    r, t = f["ratios"], f["targets"]
    i5, i6 = latest(ix, "n=100000,dim=384"), latest(ix, "n=1000000,dim=64")
    n5, n6 = _node_index(i5), _node_index(i6)
    ov = [x["figures"]["overhead"] * 100 for x in runs(llm, "overhead")]
    loc = latest(llm, "local,threads=1")["slots"]
    cold, warm = _ray2(cl, "cold-300x60"), _ray2(cl, "warm-300x60")
    cr, wr = [x["ray2_over_local"] for x in cold], [x["ray2_over_local"] for x in warm]
    dr = [x["ray2_over_local"] for x in _ray2(cl, "warm-100x20") if _default_command(x) and _on_replicas(x)]
    do = [x["ray2_over_local"] for x in _ray2(cl, "warm-100x20") if _default_command(x) and not _on_replicas(x)]
    return table(["Hot path", "Measured", "Target"], [
        [f"Formula reliability update (eq. A6), {_pow10(f['n_experiences'])} experiences x {f['horizons']} horizons, "
         f"{_pow10(f['updates'])} updates",
         f"{f['updates_per_s']['formula'] / 1e6:.1f} M updates/s: {_x(r['vs_scatter_add'])} a Numba random scatter-add "
         f"({r['vs_scatter_add_prefetch']:.2f}x one given the same prefetch), {_x(r['vs_python'])} a Python dict loop, "
         f"{_x(r['vs_pandas'])} a pandas table; peak memory {f['memory']['peak_over_raw']:.2f}x raw column bytes",
         f">= {t['vs_scatter_add']:g}x, >= {t['vs_python']:g}x, >= {t['vs_pandas']:g}x, <= {t['memory']:g}x"],
        [f"Canonical Game-of-24 state hashing, {_pow10(latest(g, 'hash')['states'])} states",
         f"{ratio_range(g, 'hash')} `hash(tuple(sorted(Fraction...)))`", f">= {latest(g, 'hash')['target']:.0f}x"],
        ["Solve all 1,820 puzzles / precompute 1,362 puzzles' state trees",
         f"{ratio_range(g, 'solve_all')} / {ratio_range(g, 'precompute')} a memoised pure-Python solver",
         f">= {latest(g, 'solve_all')['target']:.0f}x"],
        [f"Node index (hnswlib) at {_pow10(i5['n'])} nodes, dim {i5['dim']}",
         f"p50 {n5['p50_ms']:.2f} ms at recall@8 {n5['recall']:.3f}; {n5['p50_x_numpy']:.0f}x NumPy brute force per query "
         f"({n5['batch_x_numpy']:.0f}x batched); {_pow10(i6['n'])} nodes (dim {i6['dim']}): p50 {n6['p50_ms']:.2f} ms, "
         f"recall@8 {n6['recall']:.3f}", "p50 < 1 ms at recall@8 >= 0.95, >= 10x NumPy"],
        ["LLM interface overhead per request (simulated policy)",
         f"{min(ov):.1f}-{max(ov):.1f}% of the policy's own time over {len(ov)} runs", "< 5%"],
        ["Embedded SmolLM2-135M (llama.cpp, 1 thread)",
         f"{loc['1']['tokens_per_s']:.0f} tokens/s at 1 slot, {loc['4']['tokens_per_s']:.0f} at 4 slots", "-"],
        [f"Ray executor, 2 workers vs local (simulated Game-of-24 ToT+ToE, rounds of {cold[-1]['round']}, idle 2-core machine)",
         f"{statistics.median(cr):.2f}x median over {len(cr)} cold-replay runs of {cold[-1]['repeats'] * cold[-1]['episodes']} "
         f"new episodes ({min(cr):.2f}-{max(cr):.2f}x), {statistics.median(wr):.2f}x median over {len(wr)} warm reruns "
         f"({min(wr):.2f}-{max(wr):.2f}x), both with store owners; the benchmark's default command (rounds of 20, replica "
         f"mode): {statistics.median(dr):.2f}x median over {len(dr)} runs ({min(dr):.2f}-{max(dr):.2f}x)"
         f"{', **short of the target**' if statistics.median(dr) < 1.5 else ''} (with store owners: "
         f"{statistics.median(do):.2f}x over {len(do)} runs); results identical to local", ">= 1.5x"],
    ])


# marker name -> (document, topic, renderer); topic "*" passes every topic
TABLES = {
    "bench-store-update-table": ("benchmarks/results/store.md", "store", store_update),
    "bench-store-memory-table": ("benchmarks/results/store.md", "store", store_memory),
    "bench-game24-core-table": ("benchmarks/results/game24_core.md", "game24_core", game24_core),
    "bench-llm-overhead-table": ("benchmarks/results/llm.md", "llm", llm_overhead),
    "bench-llm-local-table": ("benchmarks/results/llm.md", "llm", llm_local),
    "bench-llm-client-table": ("benchmarks/results/llm.md", "llm", llm_client),
    "bench-index-10k-table": ("benchmarks/results/index.md", "index", index_table("n=10000,dim=384")),
    "bench-index-100k-table": ("benchmarks/results/index.md", "index", index_table("n=100000,dim=384")),
    "bench-index-1m-table": ("benchmarks/results/index.md", "index", index_table("n=1000000,dim=64")),
    "bench-finance-retrieval-table": ("benchmarks/results/finance_retrieval.md", "finance_retrieval", finance_retrieval),
    "bench-finance-retrieval-crossover-table": ("benchmarks/results/finance_retrieval.md", "finance_retrieval",
                                                finance_retrieval_crossover),
    "bench-finance-retrieval-filter-table": ("benchmarks/results/finance_retrieval.md", "finance_retrieval",
                                             finance_retrieval_filter),
    "finance-retrieval-table": ("docs/retrieval.md", "finance_retrieval", finance_retrieval_summary),
    "bench-cluster-loaded-table": ("benchmarks/results/cluster.md", "cluster", cluster_loaded),
    "bench-cluster-idle-table": ("benchmarks/results/cluster.md", "cluster", cluster_idle),
    "bench-cluster-cold-table": ("benchmarks/results/cluster.md", "cluster", cluster_cold),
    "bench-cluster-shares-table": ("benchmarks/results/cluster.md", "cluster", cluster_shares),
    "bench-cluster-speedup-table": ("benchmarks/results/cluster.md", "cluster", cluster_speedup),
    "bench-finance-table": ("benchmarks/results/finance.md", "finance", finance_methods),
    "bench-finance-interleaved-table": ("benchmarks/results/finance.md", "finance", finance_interleaved),
    "bench-finance-mem0-store-table": ("benchmarks/results/finance.md", "finance", finance_mem0_store),
    "bench-finance-instructions-table": ("benchmarks/results/finance.md", "finance", finance_instructions),
    "bench-sandbox-table": ("benchmarks/results/sandbox.md", "sandbox", sandbox),
    "speed-table": ("docs/commands.md", "*", speed),
    "index-summary-table": ("docs/retrieval.md", "index", index_summary),
    "store-summary-table": ("docs/store.md", "store", store_summary),
    "cluster-speedup-table": ("docs/cluster.md", "cluster", cluster_speedup),
    "cluster-recheck-table": ("benchmarks/results/cluster.md", "cluster", cluster_recheck),
    "bench-cluster-ceiling-table": ("benchmarks/results/cluster.md", "cluster", cluster_ceiling),
    "cluster-ceiling-table": ("benchmarks/results/cluster.md", "cluster", cluster_ceiling),
}

# which run keys each table reads (for the footer's commands); default: every run of the topic
KEYS = {
    "bench-store-update-table": ["n=10000000"], "bench-store-memory-table": ["n=10000000"],
    "store-summary-table": ["n=10000000"], "index-summary-table": INDEX_KEYS,
    "bench-llm-overhead-table": ["overhead"], "bench-llm-local-table": ["local,threads=1", "local,threads=2"],
    "bench-llm-client-table": ["client"],
    "bench-index-10k-table": ["n=10000,dim=384"], "bench-index-100k-table": ["n=100000,dim=384"],
    "bench-index-1m-table": ["n=1000000,dim=64"],
    "bench-finance-retrieval-table": RETRIEVAL_KEYS, "finance-retrieval-table": RETRIEVAL_KEYS,
    "bench-finance-retrieval-crossover-table": ["crossover"],
    "bench-finance-retrieval-filter-table": ["filter-vs-prefix,n=100000"],
    "bench-cluster-loaded-table": ["2026-11-29,loaded,warm-100x20"], "bench-cluster-idle-table": ["2026-11-29,idle,warm"],
    "bench-cluster-cold-table": ["2026-11-29,idle,cold-300x60"], "bench-cluster-shares-table": ["2026-11-30,shares,cold-300x60"],
    "bench-cluster-speedup-table": ["cold-300x60", "warm-300x60", "warm-100x20"],
    "cluster-speedup-table": ["cold-300x60", "warm-300x60", "warm-100x20"],
    "cluster-recheck-table": [RECHECK_KEY],
    "bench-cluster-ceiling-table": ["warm-100x20"], "cluster-ceiling-table": ["warm-100x20"],
    "bench-finance-table": ["methods,days=60"], "bench-finance-interleaved-table": ["interleaved,days=60"],
    "bench-finance-mem0-store-table": ["mem0-store,days=60", "mem0-store,days=300"],
    "bench-finance-instructions-table": ["instructions,days=60"],
}
