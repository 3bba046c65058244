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
  exactly that, and a duplicate of such a docno, or its retraction, went unseen.  Its reverse lookups of
  numbered docnos also raise ``ValueError`` on a docno no longer than the prefix (``"x"`` against ``d0``...).
"""
from __future__ import annotations

import numpy as np

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


def _sequence_positions(docnos, prefix, start, count, pad=None):
    """Positions in a block of numbered docnos (``prefix`` + the number ``start + i``, zero-padded to ``pad``
    digits when given) of ``docnos`` (a bytes array); -1 for a docno not in the block."""
    from npids.codecs.inv_intsequencemulti import isnumeric, slice_vectorized

    p = prefix if isinstance(prefix, bytes) else (prefix or "").encode()
    result = np.full(docnos.shape, -1, dtype=np.int64)
    if docnos.size == 0 or docnos.dtype.itemsize <= len(p):   # no docno long enough to hold a number
        return result
    mine = docnos.astype(f"S{len(p)}") == p if p else np.ones(docnos.shape, dtype=bool)
    rest = slice_vectorized(docnos, len(p)) if p else docnos
    width = np.char.str_len(rest)
    ok = mine & isnumeric(rest) & (width > 0)
    if pad:
        ok &= width == pad
    else:   # the number as written: no leading zero unless it is 0
        ok &= (width == 1) | ~np.char.startswith(rest, b"0")
    idx = np.full(docnos.shape, -1, dtype=np.int64)
    idx[ok] = rest[ok].astype(np.int64) - int(start or 0)
    inside = ok & (idx >= 0) & (idx < count)
    result[inside] = idx[inside]
    return result


def fix_npids_multi_block_lookup() -> bool:
    """Makes npids' reverse lookups of numbered docnos (``intsequence``, ``intsequencemulti``) find what they
    hold: the released multi-block lookup checks a number against its block's count before subtracting the
    block's first number (no docno of a block that does not start at 0 is found), and both raise on a docno no
    longer than the prefix (``"x"`` against ``d0``...: ``ValueError``) or equal to it (``"d"``).  Reads and
    writes nothing; files are unchanged.  Idempotent; returns whether the installed npids needed it."""
    if "npids-multi" in _FIXED:
        return True
    from npids.codecs.inv_intsequence import InvIntSequence
    from npids.codecs.inv_intsequencemulti import InvIntSequenceMulti

    def single(self, docnos):
        return _sequence_positions(docnos, self.prefix, self.start, self.count)

    def multi(self, docnos):
        result = np.full(docnos.shape, -1, dtype=np.int64)
        for codec, offset in zip(self.fwd.codecs, self.fwd.offsets):
            todo = result < 0
            if not todo.any():
                break
            found = _sequence_positions(docnos[todo], codec.fmt.prefix, codec.fmt.start, codec.count,
                                        getattr(codec.fmt, "pad", None))
            result[np.flatnonzero(todo)[found >= 0]] = found[found >= 0] + offset
        return result

    class _Codec:
        def __init__(self, prefix, start, count):
            self.fmt, self.count = type("F", (), {"prefix": prefix, "start": start})(), count
    probe = InvIntSequenceMulti(2)
    probe.fwd = type("W", (), {"codecs": [_Codec("d", 0, 1), _Codec("n", 1000, 1)], "offsets": [0, 1]})()
    if probe._lookup(np.array([b"n1000"]))[0] == 1:   # a fixed release: nothing to do
        return False
    single.__wrapped__, multi.__wrapped__ = InvIntSequence._lookup, InvIntSequenceMulti._lookup
    InvIntSequence._lookup, InvIntSequenceMulti._lookup = single, multi
    _FIXED.add("npids-multi")
    return True
