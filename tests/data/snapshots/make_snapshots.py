#!/usr/bin/env python3
"""Writes the CUDA memory snapshots that tests/trace/memory_snapshot_test.cpp reads.

No GPU was available to make a real one with torch.cuda.memory._dump_snapshot(), so this script
builds the same dict that torch.cuda.memory._snapshot() returns (key and action names as in
torch/csrc/cuda/Module.cpp THCPModule_memorySnapshot and torch/csrc/cuda/memory_snapshot.cpp,
torch 2.4+) and pickles it the way _dump_snapshot does (pickle.dump), with protocols 2, 4 and 5.
Stdlib only. Run from anywhere: python3 tests/data/snapshots/make_snapshots.py

Device 0 (figures the test asserts, MiB = 1048576):
  before the trace: segment A (20 MiB) holds a1 (8 MiB)          reserved 20, active 8
  e0 alloc a2 4 MiB        e1 alloc a3 6 MiB      -> active 18
  e2 segment_alloc B 2 MiB -> reserved 22 (peak; active 18 there: fragmentation 4 MiB)
  e3 alloc b1 0.5 MiB      e4 alloc b2 1 MiB      -> active 19.5 (peak)
  e5/e6 free a2            e7/e8 free b1          -> active 15
  e9 alloc a4 2 MiB -> 17  e10 snapshot           e11 free_requested a4 (still pending)
  final: A = [a1 8 alloc][a4 2 pending][2 free][a3 6 alloc][2 free], B = [0.5 free][b2 1 alloc][0.5 free]
  reserved 22 MiB, allocated (active_allocated) 15 MiB, pending 2 MiB, largest free block 2 MiB,
  max fragmentation 12 MiB (before the first event: 20 reserved, 8 active).
Device 1: segment_alloc 64 MiB, alloc 64 MiB, then an oom asking for 128 MiB.
"""
import os
import pickle

MIB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "fuzz", "corpus", "memory_snapshot")

# One frames list shared by many entries, as torch shares symbolized tracebacks: pickle memoizes it
# and writes BINGET for every later use.
FRAMES = [
    {"name": "forward", "filename": "model.py", "line": 42},
    {"name": "train_step", "filename": "train.py", "line": 7},
]
A = 0x7F3A00000000
B = 0x7F3A04000000
T0 = 1_717_000_000_000_000  # time_us, beyond 32 bits: LONG1


def block(addr, size, requested, state, frames=FRAMES):
    return {"address": addr, "size": size, "requested_size": requested, "state": state,
            "frames": frames}


def segment(device, addr, total, blocks, kind):
    allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    requested = sum(b["requested_size"] for b in blocks if b["state"] != "inactive")
    return {"device": device, "address": addr, "total_size": total, "allocated_size": allocated,
            "active_size": active, "requested_size": requested, "stream": 0,
            "segment_type": kind, "segment_pool_id": (0, 0), "is_expandable": False,
            "frames": FRAMES, "blocks": blocks}


def event(action, addr, size, t, stream=0):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "time_us": T0 + t,
         "frames": FRAMES}
    return e


def snapshot():
    seg_a = segment(0, A, 20 * MIB, [
        block(A, 8 * MIB, 8_000_000, "active_allocated"),
        block(A + 8 * MIB, 2 * MIB, 2_000_000, "active_pending_free"),
        block(A + 10 * MIB, 2 * MIB, 0, "inactive", []),
        block(A + 12 * MIB, 6 * MIB, 6_000_000, "active_allocated"),
        block(A + 18 * MIB, 2 * MIB, 0, "inactive", []),
    ], "large")
    seg_b = segment(0, B, 2 * MIB, [
        block(B, MIB // 2, 0, "inactive", []),
        block(B + MIB // 2, MIB, 1_000_000, "active_allocated"),
        block(B + 3 * MIB // 2, MIB // 2, 0, "inactive", []),
    ], "small")
    c = 0x7F4000000000
    seg_c = segment(1, c, 64 * MIB, [block(c, 64 * MIB, 64 * MIB, "active_allocated")], "large")
    trace0 = [
        event("alloc", A + 8 * MIB, 4 * MIB, 0),
        event("alloc", A + 12 * MIB, 6 * MIB, 1),
        event("segment_alloc", B, 2 * MIB, 2),
        event("alloc", B, MIB // 2, 3),
        event("alloc", B + MIB // 2, MIB, 4),
        event("free_requested", A + 8 * MIB, 4 * MIB, 5),
        event("free_completed", A + 8 * MIB, 4 * MIB, 6),
        event("free_requested", B, MIB // 2, 7),
        event("free_completed", B, MIB // 2, 8),
        event("alloc", A + 8 * MIB, 2 * MIB, 9),
        event("snapshot", 0, 0, 10),
        event("free_requested", A + 8 * MIB, 2 * MIB, 11),
    ]
    oom = {"action": "oom", "device_free": 3 * MIB, "size": 128 * MIB, "stream": 0,
           "time_us": T0 + 30, "frames": FRAMES}
    trace1 = [
        event("segment_alloc", c, 64 * MIB, 20),
        event("alloc", c, 64 * MIB, 21),
        oom,
    ]
    return {
        "segments": [seg_a, seg_b, seg_c],
        "device_traces": [trace0, trace1],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128",
            "max_split_size": 128 * MIB,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": False,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {"1": 0, "2": 0, "4": 0},
        },
    }


class NotData:  # pickles as GLOBAL (protocol 2) or STACK_GLOBAL (4, 5) plus NEWOBJ/BUILD
    def __init__(self):
        self.x = 1


def write(name, data, corpus=False):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)
    if corpus:
        with open(os.path.join(CORPUS, name), "wb") as f:
            f.write(data)


def main():
    os.makedirs(CORPUS, exist_ok=True)
    snap = snapshot()
    for proto in (2, 4, 5):
        write(f"snapshot_p{proto}.pickle", pickle.dumps(snap, protocol=proto), corpus=True)
    good = pickle.dumps(snap, protocol=4)
    write("hostile_truncated.pickle", good[: len(good) // 2])
    write("hostile_global_p2.pickle", pickle.dumps({"segments": [NotData()]}, protocol=2))
    write("hostile_global_p4.pickle", pickle.dumps({"segments": [NotData()]}, protocol=4))
    deep = []
    for _ in range(200):
        deep = [deep]
    write("hostile_deep.pickle", pickle.dumps(deep, protocol=4))
    # BINUNICODE8 declaring a 1 TiB string in a 20-byte file.
    write("hostile_huge_string.pickle",
          b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"abc.")
    # BINGET 5 with an empty memo.
    write("hostile_memo_range.pickle", b"\x80\x02h\x05.")
    cyc = []
    cyc.append(cyc)
    write("hostile_cycle.pickle", pickle.dumps(cyc, protocol=2))


if __name__ == "__main__":
    main()
