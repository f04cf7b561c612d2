#!/usr/bin/env python3
"""A model of the sm90 kernel's barrier protocol that finds deadlocks without a GPU.

    python3 scripts/sm90_protocol_model.py [--random N] [--seed S]

The producer and the two consumer warpgroups of flash_fwd_sm90.cu run as agents that advance
until each waits on something that has not happened: a K or V block landing (full), a stage
released by both warpgroups (empty, kStages blocks back), the item's slot and Q, the Q buffer
freed, or the other warpgroup's turn. When no agent can advance, the protocol has deadlocked.
The items come from the host's schedule (schedule_of in cuda_backend.cpp) and each
warpgroup's own key blocks and tail as the kernel's begin_item computes them, for every kernel
shape (stages, Q buffers, Q in registers). It models the order of waits and releases only: a
change to that order in the kernel must be made here too (bench/NOTES.md CUDA entry 30 found
a deadlock this way before any GPU ran the change). Exit status 1 on a deadlock.
"""
import argparse
import random
import sys

TILE_ROWS, GROUP_ROWS = 128, 64
# (name, keys per block, stages, Q buffers, Q in registers), as the kernel's Tiles and rule give them.
KERNELS = [("64/128", 128, 4, 2, False), ("64/192", 192, 4, 2, False), ("80/128", 128, 3, 1, True),
           ("80/192", 192, 2, 1, True), ("96/128", 128, 3, 1, True), ("96/192", 192, 2, 1, False),
           ("128/128", 128, 3, 1, True), ("128/176", 176, 2, 1, False)]


def schedule_of(lengths):
    """Tiles (first image, end image, first row), heaviest group first, as the host builds them."""
    groups, pack = [], {"first": -1, "tokens": 0, "cost": 0}

    def close_pack(end):
        if pack["tokens"] > 0:
            groups.append((pack["cost"], [(pack["first"], end, 0)]))
        pack.update(first=-1, tokens=0, cost=0)

    for image, n in enumerate(lengths):
        if n > TILE_ROWS:
            close_pack(image)
            groups.append((n * n, [(image, image + 1, q0) for q0 in range(0, n, TILE_ROWS)]))
            continue
        if pack["tokens"] + n > TILE_ROWS or image - pack["first"] >= TILE_ROWS:
            close_pack(image)
        if pack["first"] < 0:
            pack["first"] = image
        pack["tokens"] += n
        pack["cost"] += n * n
    close_pack(len(lengths))
    groups.sort(key=lambda group: -group[0])  # stable, as std::stable_sort
    return [tile for _, tiles in groups for tile in tiles]


def items_of(lengths, keys, tail_limit, window_left=-1, window_right=-1):
    """Per item: its key blocks and, per warpgroup, (own_begin, own_end, tail) as begin_item computes them."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    items = []
    for first_image, end_image, first_row in schedule_of(lengths):
        span_begin, span_end = cu[first_image], cu[end_image]
        q_begin = span_begin + first_row
        rows = min(TILE_ROWS, span_end - q_begin)
        q_last = q_begin + rows - 1
        key_begin = span_begin if window_left < 0 or window_left >= q_begin - span_begin else q_begin - window_left
        key_end = span_end if window_right < 0 or window_right >= span_end - q_last else q_last + window_right + 1

        def row_keys(r):
            token, lo, hi = q_begin + r, span_begin, span_end
            if end_image - first_image > 1:
                for image in range(first_image, end_image):
                    if cu[image] <= token < cu[image + 1]:
                        lo, hi = cu[image], cu[image + 1]
            if r >= rows:
                lo = hi = 0
            key_min = lo if window_left < 0 or window_left >= token - lo else token - window_left
            key_max = hi if window_right < 0 or window_right >= hi - token else token + window_right + 1
            return key_min, key_max

        blocks = (key_end - key_begin + keys - 1) // keys
        groups = []
        for group in range(2):
            own_begin = own_end = tail = 0
            if group * GROUP_ROWS < rows:
                lo = row_keys(group * GROUP_ROWS)[0]
                hi = row_keys(min(rows, (group + 1) * GROUP_ROWS) - 1)[1]
                own_begin = max(0, (lo - key_begin) // keys)
                own_end = max(own_begin, min(blocks, (hi - key_begin + keys - 1) // keys))
                last_keys = hi - (key_begin + (own_end - 1) * keys)
                if own_end - own_begin >= 2 and last_keys <= tail_limit:
                    tail = last_keys
            groups.append((own_begin, own_end, tail))
        items.append((blocks, groups))
    return items


def deadlocks(items, stages, q_buffers, q_in_registers):
    """Runs the protocol over one block's items; True when it deadlocks."""
    landed_k, landed_v, released_k, released_v = set(), set(), {}, {}
    slots, q_landed, q_freed, turns = set(), set(), {}, [0, 0]
    rounds = len(items)

    def producer():
        n = 0
        for r in range(rounds + 1):
            if r >= q_buffers:  # the Q buffer's last item, done by both warpgroups
                yield lambda r=r: q_freed.get(r - q_buffers, 0) >= 2
            slots.add(r)
            if r == rounds:
                return
            q_landed.add(r)
            for x in range(n, n + items[r][0]):  # K, then V, of each block, once its stage is free
                if x >= stages:
                    yield lambda x=x: released_k.get(x - stages, 0) >= 2
                landed_k.add(x)
                if x >= stages:
                    yield lambda x=x: released_v.get(x - stages, 0) >= 2
                landed_v.add(x)
            n += items[r][0]

    def consumer(group):
        def turn():  # strict alternation, warpgroup 0 first
            t = turns[group] + 1
            yield (lambda: turns[1] >= t - 1) if group == 0 else (lambda: turns[0] >= t)
            turns[group] = t

        def wait_k(x):
            yield lambda: x in landed_k

        def wait_v(x):
            yield lambda: x in landed_v

        def release_k(x):
            released_k[x] = released_k.get(x, 0) + 1

        def release_v(x):
            released_v[x] = released_v.get(x, 0) + 1

        def pass_block(x):
            yield from wait_k(x)
            yield from wait_v(x)
            release_k(x), release_v(x)
            yield from turn()

        n, pending, pending_v = 0, False, 0
        for r in range(rounds + 1):
            valid = r < rounds
            yield lambda r=r: r in slots  # begin_item
            blocks, (own_begin, own_end, tail) = (items[r][0], items[r][1][group]) if valid else (0, (0, 0, 0))
            for j in range(own_begin):
                yield from pass_block(n + j)
            if valid:
                yield lambda r=r: r in q_landed
                if q_in_registers:
                    q_freed[r] = q_freed.get(r, 0) + 1
                yield from wait_k(n + own_begin)
            if pending:
                yield from wait_v(pending_v)
            yield from turn()  # the item's first S and the last item's last P V
            if valid and own_begin < own_end:
                release_k(n + own_begin)
            if pending:
                release_v(pending_v)
            if not valid:
                break
            pending = own_begin < own_end
            if pending:
                full_end = own_end - (tail > 0)
                for j in range(own_begin + 1, full_end):
                    yield from wait_k(n + j)
                    yield from wait_v(n + j - 1)
                    yield from turn()
                    release_k(n + j), release_v(n + j - 1)
                if tail:
                    yield from turn()
                    yield from wait_k(n + full_end)
                    yield from wait_v(n + full_end)
                    release_k(n + full_end), release_v(n + full_end)
                pending_v = n + full_end - 1
            else:
                release_k(n)
                yield from wait_v(n)
                release_v(n)
            if not q_in_registers:
                q_freed[r] = q_freed.get(r, 0) + 1
            passed_from = max(own_end, own_begin + 1)
            if pending and passed_from < blocks:  # flushed: the P V now, outside the turns
                yield from wait_v(pending_v)
                release_v(pending_v)
                pending = False
            for j in range(passed_from, blocks):
                yield from pass_block(n + j)
            n += blocks
        if group == 0:
            yield from turn()

    agents = {"producer": producer(), "consumer 0": consumer(0), "consumer 1": consumer(1)}
    waiting = {name: None for name in agents}
    while agents:
        progressed = False
        for name in list(agents):
            while waiting[name] is None or waiting[name]():
                try:
                    waiting[name] = next(agents[name])
                except StopIteration:
                    del agents[name]
                    progressed = True
                    break
                progressed = True
        if not progressed:
            return True
    return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--random", type=int, default=2000, help="random batches after the fixed ones")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    batches = {"internvit 1025 x2": [1025, 1025], "clip 577 x3": [577] * 3, "256 x2": [256, 256],
               "257 and short": [257, 257, 100, 30], "one-row tiles": [129, 129, 129], "641 x2": [641, 641],
               "mixed": [1025, 577, 64, 30, 20, 257, 197, 129, 700], "packs": [30, 40, 50, 60, 10, 64, 65]}
    windows = [(-1, -1), (64, 64), (1000, 0), (0, 1000), (100, 37), (300, 5)]
    cases = [(kernel, lengths, tail, window, None) for kernel in KERNELS for lengths in batches.values()
             for tail in (4, 100) for window in windows]
    rng = random.Random(args.seed)
    for _ in range(args.random):
        lengths = [rng.choice([rng.randint(0, 140), rng.randint(129, 1100), 1025, 577, 257, rng.randint(1, 64)])
                   for _ in range(rng.randint(1, 6))]
        window = rng.choice([(-1, -1), (-1, -1), (rng.randint(0, 400), rng.randint(0, 400)),
                             (rng.randint(0, 400), -1), (-1, rng.randint(0, 400))])
        cases.append((rng.choice(KERNELS), lengths, rng.choice([0, 4, 100, 200]), window, rng.random()))
    failures = 0
    for (name, keys, stages, q_buffers, q_in_registers), lengths, tail, window, keep in cases:
        items = items_of(lengths, keys, tail, *window)
        if keep is not None:  # a block of a persistent grid walks some of the items
            items = [item for item in items if rng.random() < 0.7] or items[:1]
        if sum(lengths) and deadlocks(items, stages, q_buffers, q_in_registers):
            failures += 1
            print(f"deadlock: kernel {name}, lengths {lengths}, tail limit {tail}, window {window}")
    print(f"{len(cases)} cases, {failures} deadlocks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
