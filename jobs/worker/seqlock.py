"""Sequence words for the worker's shared-memory tables (the slot table, slots.py, and the
metrics table, metrics.py): one writer per region bumps its word to odd, writes, and bumps
it to even; a reader takes a region only if the word was even and the same before and
after it read.

That holds only if a reader sees each word as a whole. ``struct.pack_into`` does not give
that: it zero-fills the field and then writes it byte by byte, so a reader can see 0, an
even sequence, in the middle of a write, before and after reading half of one. These words
are stored and loaded through a memoryview of unsigned 64-bit items at offsets that are
multiples of 8: one aligned 8-byte access each, which a reader on another core sees whole.
"""

from __future__ import annotations

import mmap

WORD = 8


def aligned(size: int) -> int:
    """``size`` rounded up to a whole number of words, so that the next region's sequence
    word is aligned too."""
    return -(-size // WORD) * WORD


class SequenceWords:
    """The sequence words of a shared mapping, addressed by the byte offset of each: a
    multiple of WORD (the tables' layouts make every region a whole number of words, with
    aligned())."""

    def __init__(self, buf: mmap.mmap) -> None:
        self._words = memoryview(buf).cast("Q")

    def load(self, offset: int) -> int:
        return self._words[offset // WORD]

    def begin(self, offset: int) -> int:
        """Mark the region as being written (odd); returns the sequence to hand to end().
        A word left odd by a writer killed mid-write is first rounded up to even, so that
        the parity keeps its meaning for the writers that follow."""
        index = offset // WORD
        seq = self._words[index]
        seq += seq & 1
        self._words[index] = seq + 1
        return seq

    def end(self, offset: int, seq: int) -> None:
        """Mark the write begun at ``seq`` as whole (even again, and changed)."""
        self._words[offset // WORD] = seq + 2
