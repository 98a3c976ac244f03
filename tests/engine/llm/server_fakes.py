"""The server model's test fixtures: a toy engine profile and a fake clock (no test sleeps)."""

from engine.llm.server_model import ServerProfile

# 10 ms per step + 1 ms per sequence; 1000 prompt tokens/s; 2 slots
TOY = ServerProfile(decode_step_s=0.010, decode_step_per_seq_s=0.001, prefill_tokens_per_s=1000.0, max_num_seqs=2)


class FakeClock:
    """``now`` and ``sleep`` for a backend under test: sleeping only advances the time (and is logged)."""

    def __init__(self, start: float = 100.0):
        self.t = start
        self.slept = []

    def now(self):
        return self.t

    def sleep(self, s):
        self.slept.append(s)
        self.t += s
