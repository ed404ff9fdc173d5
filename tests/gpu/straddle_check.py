"""Does a cudaMemcpyAsync whose host range spans two separate host registrations work?

One anonymous mapping of 1 GiB, registered as two 512 MiB halves (as a
background registration in 512 MiB chunks does), then as one 1 GiB range;
copies inside a half, across the boundary and over the whole, each reported
as ok or with the CUDA error.  Prints JSON.
"""

import json
import mmap

import torch

MiB = 1 << 20


def copy(host, lo, hi, dev):
    try:
        dev[: hi - lo].copy_(host[lo:hi], non_blocking=True)
        torch.cuda.synchronize()
        return "ok"
    except Exception as e:  # the CUDA error is the result we report
        torch.cuda.synchronize()
        return str(e).splitlines()[0]


def run(halves):
    n = 1024 * MiB
    m = mmap.mmap(-1, n)
    host = torch.frombuffer(m, dtype=torch.uint8)
    host.fill_(7)
    ptr = host.data_ptr()
    cudart = torch.cuda.cudart()
    parts = [(0, n // 2), (n // 2, n // 2)] if halves else [(0, n)]
    for off, length in parts:
        assert int(cudart.cudaHostRegister(ptr + off, length, 0)) == 0
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    out = {
        "is_pinned": bool(host.is_pinned()),
        "inside_first_half": copy(host, 0, 256 * MiB, dev),
        "inside_second_half": copy(host, 600 * MiB, 700 * MiB, dev),
        "across_the_boundary_2MiB": copy(host, 511 * MiB, 513 * MiB, dev),
        "whole": copy(host, 0, n, dev),
    }
    out["bytes_right"] = bool((dev[: 2 * MiB] == 7).all())
    for off, _ in parts:
        cudart.cudaHostUnregister(ptr + off)
    del host
    m.close()
    return out


print(json.dumps({"two_registrations": run(True), "one_registration": run(False)}, indent=1))
