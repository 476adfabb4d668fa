"""Many keys looked for in many texts, in time linear in the texts (code_mapping's IR scopes in op names,
merge_result's API prefixes in row names)."""

from __future__ import annotations

from bisect import bisect_right

# Keys at least this long are found through their first characters; shorter ones are looked up directly.
HEAD = 4


class SubstringIndex:
    """Every key occurring anywhere in a text, ordered by start position, then length.

    The keys are kept sorted: the keys that are prefixes of a text are found by a few bisections instead of
    trying every substring, so a lookup costs about one bisection per position where some key could start,
    whatever the number of keys.
    """

    def __init__(self, keys):
        keys = {key for key in keys if key}
        self.keys = sorted(key for key in keys if len(key) >= HEAD)
        self.heads = {key[:HEAD] for key in self.keys}
        self.short = {key for key in keys if len(key) < HEAD}
        self.short_lengths = sorted({len(key) for key in self.short})

    def _prefix_keys(self, text: str) -> list:
        """The long keys that are prefixes of text, shortest first."""
        found = []
        probe = text
        keys = self.keys
        while len(probe) >= HEAD:
            position = bisect_right(keys, probe) - 1
            if position < 0:
                break
            key = keys[position]
            if probe.startswith(key):
                found.append(key)
                probe = key[:-1]
            else:
                probe = probe[:_common_prefix_length(key, probe)]
        found.reverse()
        return found

    def find(self, text: str) -> list:
        """The keys occurring in text, by start position, then length (a key occurring twice is listed twice)."""
        matched = []
        heads, short, lengths = self.heads, self.short, self.short_lengths
        size = len(text)
        for start in range(size):
            if short:
                matched.extend(text[start:start + n] for n in lengths
                               if start + n <= size and text[start:start + n] in short)
            if text[start:start + HEAD] in heads:
                matched.extend(self._prefix_keys(text[start:]))
        return matched


def _common_prefix_length(first: str, second: str) -> int:
    low, high = 0, min(len(first), len(second))
    while low < high:
        middle = (low + high + 1) // 2
        if first[:middle] == second[:middle]:
            low = middle
        else:
            high = middle - 1
    return low
