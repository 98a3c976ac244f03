"""Feature-hashing text embedding kernel (the "hashing trick", Weinberger et al. 2009).

Texts arrive as one UTF-8 byte buffer ``buf u1[total]`` with ``offsets i8[n + 1]``;
``out f4[n, dim]`` receives the L2-normalised word-n-gram and byte-n-gram bags mixed by
``char_weight``. ``engine.embed.hashing.HashingEmbedder`` validates and calls it.
"""

import numba
import numpy as np

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@numba.njit(cache=True, inline="always")
def _mix64(h):
    """splitmix64 finaliser: u8 -> u8 with well-spread bits."""
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@numba.njit(cache=True, inline="always")
def _is_token_byte(b):
    return (48 <= b <= 57) or (97 <= b <= 122) or (65 <= b <= 90) or b >= 128


@numba.njit(cache=True)
def hash_embed_kernel(buf, offsets, dim, seed, word_ngrams, char_min, char_max, char_weight, out):
    """Feature-hash ``n`` texts into ``out``.

    buf u1[total]: concatenated lower-cased UTF-8 texts; offsets i8[n + 1];
    dim, word_ngrams, char_min, char_max: int; seed: u8; char_weight: f8 in [0, 1];
    out f4[n, dim] (written; each row has unit norm).
    """
    n = offsets.shape[0] - 1
    words = np.zeros(dim, np.float64)
    chars = np.zeros(dim, np.float64)
    prev = np.zeros(8, np.uint64)  # hashes of the last word_ngrams - 1 tokens (word_ngrams <= 8)
    salt_w = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(1)
    salt_c = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(2)
    for i in range(n):
        words[:] = 0.0
        chars[:] = 0.0
        lo = offsets[i]
        hi = offsets[i + 1]
        # word n-grams
        n_prev = 0
        p = lo
        while p < hi:
            while p < hi and not _is_token_byte(buf[p]):
                p += 1
            if p >= hi:
                break
            h = _FNV_OFFSET ^ salt_w
            while p < hi and _is_token_byte(buf[p]):
                h ^= np.uint64(buf[p])
                h *= _FNV_PRIME
                p += 1
            g = _mix64(h)
            words[g % np.uint64(dim)] += 1.0 if (g >> np.uint64(63)) == 0 else -1.0
            # n-grams ending at this token: combine with up to word_ngrams - 1 previous tokens
            acc = h
            for j in range(min(n_prev, word_ngrams - 1)):
                acc = (acc * _FNV_PRIME) ^ prev[j] ^ np.uint64(j + 1)
                g = _mix64(acc)
                words[g % np.uint64(dim)] += 1.0 if (g >> np.uint64(63)) == 0 else -1.0
            for j in range(min(n_prev, 7), 0, -1):
                prev[j] = prev[j - 1]
            prev[0] = h
            n_prev += 1
        # byte n-grams of " " + text + " "
        length = hi - lo + 2
        for m in range(char_min, char_max + 1):
            if m > length and m != char_min:
                break
            last = max(length - m, 0)
            for s in range(last + 1):
                h = (_FNV_OFFSET ^ salt_c) + np.uint64(m)
                stop = min(s + m, length)
                for q in range(s, stop):
                    b = 32 if (q == 0 or q == length - 1) else buf[lo + q - 1]
                    h ^= np.uint64(b)
                    h *= _FNV_PRIME
                g = _mix64(h)
                chars[g % np.uint64(dim)] += 1.0 if (g >> np.uint64(63)) == 0 else -1.0
        nw = np.sqrt(np.sum(words * words))
        nc = np.sqrt(np.sum(chars * chars))
        ww = (1.0 - char_weight) / nw if nw > 0 else 0.0
        wc = char_weight / nc if nc > 0 else 0.0
        if nw == 0 and nc > 0:
            wc = 1.0 / nc
        if nc == 0 and nw > 0:
            ww = 1.0 / nw
        tot = 0.0
        for d in range(dim):
            v = ww * words[d] + wc * chars[d]
            chars[d] = v
            tot += v * v
        tot = np.sqrt(tot)
        if tot == 0.0:  # all features cancelled (practically impossible): fall back to bucket 0
            chars[0] = 1.0
            tot = 1.0
        for d in range(dim):
            out[i, d] = chars[d] / tot
