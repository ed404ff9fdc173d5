# SPDX-License-Identifier: Apache-2.0
"""Without torch: import, probe, create and buffers work; tensors() names the package."""

import os
import subprocess
import sys
import textwrap

# Make `import torch` fail as it does where python3-torch is not installed.
BLOCK_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NoTorch())
    """
)


def run_without_torch(body: str) -> subprocess.CompletedProcess:
    code = BLOCK_TORCH + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True, timeout=60
    )


def test_import_probe_create_and_buffers_work_without_torch():
    result = run_without_torch(
        """
        import sys
        import mooncake.shared_segment as s
        assert s.torch is None and "torch" not in sys.modules
        assert s.shared_segment_supported() is True
        seg = s.create_shared_segment("cache", {
            "k": {"count": 3, "shape": (8, 4), "dtype": "bfloat16"},
            "v": {"count": 2, "shape": (16,), "dtype": "int8"},
        }, 1, 0)
        bufs = seg.buffers("k")
        assert len(bufs) == 3 and all(len(b) == 64 for b in bufs)
        bufs[2][0:4] = b"abcd"
        assert bytes(seg.buffers("k")[2][0:4]) == b"abcd"
        try:
            seg.tensors("k")
        except s.SharedSegmentError as exc:
            print("TENSORS:", exc)
        else:
            raise AssertionError("tensors() without torch did not raise")
        del bufs
        seg.close()
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
    assert "TENSORS: PyTorch is required to create shared-segment tensor views" in result.stdout
    assert "python3-torch" in result.stdout


def test_other_import_errors_are_not_swallowed():
    result = run_without_torch(
        """
        import builtins
        real_import = builtins.__import__
        def broken(name, *args, **kwargs):
            if name == "torch":
                raise ImportError("libtorch_cpu.so: cannot open shared object file")
            return real_import(name, *args, **kwargs)
        builtins.__import__ = broken
        try:
            import mooncake.shared_segment
        except ImportError as exc:
            print("RAISED:", exc)
        """
    )
    assert "RAISED: libtorch_cpu.so" in result.stdout, result.stdout + result.stderr


def test_the_dtypes_of_newer_torches_work_by_name_without_torch():
    result = run_without_torch(
        """
        import mooncake.shared_segment as s
        names = {"float8_e8m0fnu": 1, "float4_e2m1fn_x2": 1, "bits8": 1, "bits16": 2, "bits1x8": 1,
                 "uint1": 1, "int7": 1, "qint32": 4}
        blocks = {f"b{i}": {"count": 2, "shape": (8,), "dtype": n} for i, n in enumerate(names)}
        with s.create_shared_segment("names", blocks, 1, 0) as seg:
            for i, (n, size) in enumerate(names.items()):
                assert [len(b) for b in seg.buffers(f"b{i}")] == [8 * size] * 2, n
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout
