"""A JVM's signal handlers survive Ray in the same process (pyterrier_sci.signals): ray.init took SIGSEGV from
the JVM that runs Lucene, and ray.shutdown left it at the default action, so the JVM's next safepoint poll killed
the process (the full suite died at a Lucene test after the Ray tests)."""
import os
import subprocess
import sys
import textwrap

import pytest

from pyterrier_sci.signals import JVM_SIGNALS, keep_native_handlers, native_handler

SCRIPT = textwrap.dedent("""
    import signal, sys
    from pyterrier_sci.plugins.bm25.lucene import start_jvm
    from pyterrier_sci.scale import init_ray
    from pyterrier_sci.signals import JVM_SIGNALS, native_handler
    start_jvm()
    from jnius import autoclass
    autoclass("java.lang.System").gc()
    before = [native_handler(s) for s in JVM_SIGNALS]
    import ray
    init_ray(num_cpus=1)
    during = [native_handler(s) for s in JVM_SIGNALS]
    ray.shutdown()
    after = [native_handler(s) for s in JVM_SIGNALS]
    for _ in range(5):
        autoclass("java.lang.System").gc()
    print(before, during, after, sep="\\n")
""")


def test_keep_native_handlers_restores_what_a_library_replaced():
    import faulthandler
    was = faulthandler.is_enabled()
    faulthandler.disable()
    try:
        before = native_handler(JVM_SIGNALS[0])
        with keep_native_handlers():
            faulthandler.enable()          # installs libpython's handler for SIGSEGV
            assert native_handler(JVM_SIGNALS[0]) != before
        assert native_handler(JVM_SIGNALS[0]) == before
    finally:
        faulthandler.disable()
        if was:
            faulthandler.enable()


@pytest.mark.skipif(os.environ.get("PYTERRIER_SCI_SKIP_RAY") == "1", reason="Ray tests disabled")
def test_ray_leaves_the_jvms_handlers_in_place():
    pytest.importorskip("ray")
    pytest.importorskip("pyserini")
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONSAFEPATH="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    before, during, after = (eval(line) for line in out.stdout.strip().splitlines()[-3:])
    assert before[0] and before[0].endswith("libjvm.so"), before     # the JVM handles SIGSEGV itself
    assert during == before and after == before, (before, during, after)
