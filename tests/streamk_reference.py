"""TEST ORACLE, written independently of mmaemu (by the research that read the kernel's source), kept as it was written.

Host-side Stream-K decomposition of torch 2.7.1's sm_89 row-wise kernel, transcribed from
CUTLASS v3.8.0 include/cutlass/gemm/threadblock/threadblock_swizzle_streamk.h (constructor,
get_blocks, get_sk_blocks, get_tile_offset, get_iter_extents, get_sk_block_idx) and
include/cutlass/gemm/kernel/gemm_universal_with_visitor_streamk.h (gemm(), process_tile()).

It says, for every output tile, which K-iterations (64 wide) each thread block accumulates and how the
partial sums are combined.  Float heuristics are evaluated in float32 like the C++ (numpy.float32).

Usage: python streamk_sm89.py M N K [sms=24] [occupancy=2]
"""
import sys

import numpy as np

F = np.float32
TILE_M, TILE_N, TILE_K = 64, 128, 64          # RowwiseScaledMM.cu (2.7.1) f8f8bf16_rowwise_impl_sm89
K_MIN_ITERS_PER_SK_BLOCK = 2
COHORT_M, COHORT_N = 8, 4
CTAS_PER_COHORT = COHORT_M * COHORT_N


def get_sk_blocks(sk_tiles, iters_per_tile, avail_sms, max_sk_occupancy, allow_partial_wave):
    savings_iters, sk_blocks = -(2 ** 31), 0
    if sk_tiles == 0:
        return 0, savings_iters
    sk_iters = sk_tiles * iters_per_tile
    dp_equiv_waves = (sk_tiles + avail_sms - 1) // avail_sms
    dp_equiv_iters = iters_per_tile * dp_equiv_waves
    min_sk = min(avail_sms, sk_tiles + 1) if allow_partial_wave else avail_sms
    max_sk = min(avail_sms * max_sk_occupancy, sk_iters // K_MIN_ITERS_PER_SK_BLOCK)
    for trial in range(min_sk, max_sk + 1):
        sk_waves = (trial + avail_sms - 1) // avail_sms
        max_iters_per_block = (sk_iters + trial - 1) // trial
        sk_iter_equiv = max_iters_per_block * sk_waves
        num_peers = ((trial + sk_tiles - 1) // sk_tiles) + 1
        iter_cost = F(F(F(0.02) * F(num_peers)) * F(sk_iter_equiv))
        if trial % sk_tiles == 0:
            num_peers = trial // sk_tiles
            iter_cost = F(0.0)
        peer_cost = F(F(2.0) * F(num_peers))
        base_cost = F(F(2.0) * F(sk_waves))
        fixup = int(F(F(base_cost + iter_cost) + peer_cost))
        trial_savings = dp_equiv_iters - sk_iter_equiv - fixup
        if trial_savings >= savings_iters:
            savings_iters, sk_blocks = trial_savings, trial
    return sk_blocks, savings_iters


def get_blocks(output_tiles, iters_per_tile, avail_sms, sm_occupancy):
    full_waves = output_tiles // avail_sms
    full_wave_tiles = full_waves * avail_sms
    partial = output_tiles - full_wave_tiles
    if partial == 0:
        return output_tiles, 0
    if full_waves < sm_occupancy:
        sk, score = get_sk_blocks(partial, iters_per_tile, avail_sms, sm_occupancy - full_waves, True)
        return (output_tiles, 0) if score < 0 else (full_wave_tiles, sk)
    if sm_occupancy > 1 and full_waves % sm_occupancy == sm_occupancy - 1:
        sk, score = get_sk_blocks(partial, iters_per_tile, avail_sms, 1, True)
        if score >= 0:
            return full_wave_tiles, sk
    dp_tiles = full_wave_tiles - avail_sms
    max_occ = sm_occupancy - ((full_waves - 1) % sm_occupancy)
    sk, score = get_sk_blocks(partial + avail_sms, iters_per_tile, avail_sms, max_occ, False)
    return (output_tiles, 0) if score < 0 else (dp_tiles, sk)


def mapping(M, N, K, sms=24, occupancy=2, acc_fragments=None):
    """Returns the block mapping as a dict (names as in the C++)."""
    avail = max(1, sms)                      # args.avail_sms == -1 -> device_sms
    iters_per_tile = (K + TILE_K - 1) // TILE_K
    tm, tn = (M + TILE_M - 1) // TILE_M, (N + TILE_N - 1) // TILE_N
    output_tiles = tm * tn
    dp_tiles, sk_blocks = get_blocks(output_tiles, iters_per_tile, avail, occupancy) if avail > 1 else (output_tiles, 0)
    sk_tiles = output_tiles - dp_tiles
    m = dict(M=M, N=N, K=K, tiled_m=tm, tiled_n=tn, iters_per_tile=iters_per_tile, sk_tiles=sk_tiles,
             sk_blocks=0, sk_waves=0, sk_regions=1, reduction_blocks=0, cohort_raster=False)
    if sk_blocks > 0:
        sk_waves = (sk_blocks + avail - 1) // avail
        sk_iters = sk_tiles * iters_per_tile
        sk_blocks = min(sk_blocks, sk_iters)
        normal = sk_iters // sk_blocks
        big = sk_iters - normal * sk_blocks
        regions = sk_tiles if (sk_blocks > sk_tiles and sk_blocks % sk_tiles == 0) else 1
        separate = sk_waves < occupancy and sk_blocks > 2 * sk_tiles
        m.update(sk_blocks=sk_blocks, sk_waves=sk_waves, sk_regions=regions,
                 sk_blocks_per_region=sk_blocks // regions, sk_big_blocks_per_region=big // regions,
                 sk_iters_per_region=sk_iters // regions, sk_iters_per_normal_block=normal,
                 separate_reduction=separate)
    dp_blocks = dp_tiles
    ctm, ctn = (tm + COHORT_M - 1) // COHORT_M, (tn + COHORT_N - 1) // COHORT_N
    cohort_blocks = ctm * ctn * CTAS_PER_COHORT
    cohort_eff = F(dp_blocks) / F(cohort_blocks)
    sk_in_range = True
    if sk_tiles > 0:
        c = (sk_tiles - 1) // CTAS_PER_COHORT
        cgm = c // ctn
        cgn = ctn - 1 if cgm > 0 else c % ctn
        if (cgm + 1) * COHORT_M >= tm or (cgn + 1) * COHORT_N >= tn:
            sk_in_range = False
    if sk_in_range and dp_blocks >= sms * occupancy * 2 and cohort_eff > F(0.85):
        m["cohort_raster"] = True
    return m


def tile_offset(m, tile_idx):
    tm, tn = m["tiled_m"], m["tiled_n"]
    r, c = divmod(tile_idx, tn)                     # row-major raster
    if tm < tn:
        c, r = divmod(tile_idx, tm)                 # column-major raster
    if m["cohort_raster"]:
        ctn = (tn + COHORT_N - 1) // COHORT_N
        cgm, cgn = divmod(tile_idx // CTAS_PER_COHORT, ctn)
        bm, bn = divmod(tile_idx % CTAS_PER_COHORT, COHORT_N)
        r, c = cgm * COHORT_M + bm, cgn * COHORT_N + bn
    return r, c


def iter_extents(m, b):
    region, bir = divmod(b, m["sk_blocks_per_region"])
    begin = region * m["sk_iters_per_region"] + bir * m["sk_iters_per_normal_block"]
    n = m["sk_iters_per_normal_block"]
    if bir < m["sk_big_blocks_per_region"]:
        begin += bir
        n += 1
    else:
        begin += m["sk_big_blocks_per_region"]
    return begin, begin + n


def sk_tiles(m):
    """For every SK tile: (tile_m, tile_n, [(block, k_iter_begin, k_iter_end), ...] in block order)."""
    out = {}
    if not m["sk_blocks"]:
        return out
    ipt = m["iters_per_tile"]
    for b in range(m["sk_blocks"]):
        lo, hi = iter_extents(m, b)
        t = (hi - 1) // ipt
        while True:
            t0 = t * ipt
            kb, ke = max(lo, t0) - t0, hi - t0 if hi - t0 < ipt else ipt
            out.setdefault(t, []).append((b, kb, ke))
            if lo >= t0:
                break
            hi, t = t0, t - 1
    return {t: (tile_offset(m, t), sorted(v)) for t, v in sorted(out.items())}


def main():
    M, N, K = (int(x) for x in sys.argv[1:4])
    sms = int(sys.argv[4]) if len(sys.argv) > 4 else 24
    occ = int(sys.argv[5]) if len(sys.argv) > 5 else 2
    m = mapping(M, N, K, sms, occ)
    print({k: v for k, v in m.items()})
    for t, ((r, c), peers) in sk_tiles(m).items():
        print(f"SK tile {t} at (m-tile {r}, n-tile {c}): peers (block, k_iter_begin, k_iter_end) {peers}")


if __name__ == "__main__":
    main()
