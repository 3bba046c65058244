"""Fixes for bugs in the libraries the toolkit builds on, each applied by the code that meets the bug (before
it writes), limited to the behaviour that is wrong, and tested against the unfixed library
(tests/test_upstream.py).  Each names the bug; remove one when the library's release fixes it.

- :func:`fix_npids_single_docno_blocks`: npids (<= 0.1.3, the latest release) writes a block of its docno
  lookup that holds a single docno with its ``fixedbytes`` format of width 0 (the whole docno becomes the
  block's "common prefix"), which no reader can open (``ZeroDivisionError`` in ``npids.utils.wrap_mmap``).
  A FlexIndex or ColBERT index of one document, or whose last block starts with a docno longer than those
  before it, is written and then cannot be read: appending one paper to a growing index made exactly that.
- :func:`fix_npids_multi_block_lookup`: npids (<= 0.1.3) finds no docno of a block after the first when the
  docnos are numbered sequences (``d0`` ... ``d299`` then ``n1000`` ... ``n1049``; ``intsequencemulti``): its
  reverse lookup compares a docno's number with the block's count before subtracting the block's first
  number, so ``n1000`` is "not found" (-1).  Appending a batch numbered apart from the base documents made
  exactly that, and a duplicate of such a docno, or its retraction, went unseen.
"""
from __future__ import annotations

__all__ = ["fix_npids_single_docno_blocks", "fix_npids_multi_block_lookup"]

_FIXED = set()


def fix_npids_single_docno_blocks() -> bool:
    """Keeps npids' ``fixedbytes`` docno format at least one byte wide: the common prefix it seeds never takes
    the whole docno (a block of one docno stores its last byte).  Files it writes are read by any npids
    version (the format records its prefix and width, as before); lookups are unchanged.  Idempotent; returns
    whether the installed npids needed it."""
    if "npids" in _FIXED:
        return True
    from npids.codecs.fwd_fixedbytes import FwdFixedBytes

    probe = FwdFixedBytes()
    probe.seed("only-docno")
    if probe.size() > 0:  # a fixed release: nothing to do
        return False
    seed = FwdFixedBytes.seed

    def seed_at_least_one_byte(self, id):
        ok = seed(self, id)
        if self.prefix is not None and self.length is not None and len(self.prefix) >= self.length:
            self.prefix = self.prefix[:self.length - 1] if self.length > 0 else b""
        return ok

    seed_at_least_one_byte.__wrapped__ = seed
    FwdFixedBytes.seed = seed_at_least_one_byte
    _FIXED.add("npids")
    return True


def fix_npids_multi_block_lookup() -> bool:
    """Makes npids' ``intsequencemulti`` reverse lookup subtract each block's first number before it checks the
    block's range (the released one checks first, so no docno of a block that does not start at 0 is found).
    Reads and writes nothing; files are unchanged.  Idempotent; returns whether the installed npids needed it."""
    if "npids-multi" in _FIXED:
        return True
    import numpy as np
    from npids.codecs.inv_intsequencemulti import InvIntSequenceMulti, isnumeric, slice_vectorized

    def lookup(self, docnos):
        result = np.full(docnos.shape, -1)
        found = np.zeros(docnos.shape, dtype=bool)
        for codec, offset in zip(self.fwd.codecs, self.fwd.offsets):
            prefix = (codec.fmt.prefix or "").encode()
            mine = ~found
            if prefix:
                mine &= docnos.astype(f"S{len(prefix)}") == prefix
            if not mine.any():
                continue
            nums = slice_vectorized(docnos[mine], len(prefix)) if prefix else docnos[mine]
            numeric = isnumeric(nums) & (np.char.str_len(nums) > 0)
            # the number as written (no leading zero unless it is 0): the block's docnos are str(start + i)
            canonical = numeric & ((np.char.str_len(nums) == 1) | ~np.char.startswith(nums, b"0"))
            idxs = np.full(len(nums), -1, dtype=np.int64)
            idxs[canonical] = nums[canonical].astype(np.int64) - int(codec.fmt.start or 0)
            inside = canonical & (idxs >= 0) & (idxs < codec.count)
            where = np.flatnonzero(mine)[inside]
            result[where] = idxs[inside] + offset
            found[where] = True
            if found.all():
                break
        return result

    probe = InvIntSequenceMulti(2)

    class _Codec:
        def __init__(self, prefix, start, count):
            self.fmt, self.count = type("F", (), {"prefix": prefix, "start": start})(), count
    probe.fwd = type("W", (), {"codecs": [_Codec("d", 0, 1), _Codec("n", 1000, 1)], "offsets": [0, 1]})()
    if probe._lookup(np.array([b"n1000"]))[0] == 1:   # a fixed release: nothing to do
        return False
    lookup.__wrapped__ = InvIntSequenceMulti._lookup
    InvIntSequenceMulti._lookup = lookup
    _FIXED.add("npids-multi")
    return True
