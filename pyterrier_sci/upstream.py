"""Fixes for bugs in the libraries the toolkit builds on, each applied by the code that meets the bug (before
it writes), limited to the behaviour that is wrong, and tested against the unfixed library
(tests/test_upstream.py).  Each names the bug; remove one when the library's release fixes it.

- :func:`fix_npids_single_docno_blocks`: npids (<= 0.1.3, the latest release) writes a block of its docno
  lookup that holds a single docno with its ``fixedbytes`` format of width 0 (the whole docno becomes the
  block's "common prefix"), which no reader can open (``ZeroDivisionError`` in ``npids.utils.wrap_mmap``).
  A FlexIndex or ColBERT index of one document, or whose last block starts with a docno longer than those
  before it, is written and then cannot be read: appending one paper to a growing index made exactly that.
"""
from __future__ import annotations

__all__ = ["fix_npids_single_docno_blocks"]

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
