// Where `auto` runs a CUDA call on cudnn instead of cuda: the crossover measured on an H200
// (bench/results/h200-2026-12-04-crossover.json, `CROSSOVER=1 bash scripts/device_run.sh`, the
// sm90 kernel with the key blocks its rule picks: 192 at head dim 80 only at 2048 tokens, 176 at
// 128 from 512). Uniform batches of 32768 tokens, bf16, TFLOP/s cuda vs cudnn:
//   image length      64          128          256          512         1024         2048
//   head dim  64   43 vs 39    106 vs 138   210 vs 233   268 vs 311   318 vs 372   347 vs 404
//   head dim  80   85 vs 40    130 vs 140   228 vs 223   292 vs 293   353 vs 348   402 vs 360
//   head dim 128   86 vs 62    131 vs 197   293 vs 347   391 vs 458   459 vs 540   492 vs 594
// cuda leads at 64 tokens (and on qwen25vl-window, 64-token windows: 81 vs 35) at every head
// dim; cudnn from 128 on at head dims 64 and 128; at head dims 72 and 80 (72 runs as 80 on
// cuda) the sm90 kernel leads from 256 on (ties at 512 and 1024, and 6-22% ahead on the public
// workloads siglip, qwen25vl-mixed32, qwen25vl-large4, qwen3vl-mixed32). Off sm90 (the sm80
// kernel) cudnn led from 128 tokens at every head dim (the 2026-12-02 crossover).
//
// Uniform batches that run dense (dense_batch.h: not prepared, token-major) have their own
// crossover, measured on an H100 (bench/results/h100-2026-12-06-s13-crossover.json, the same
// command; the column cudnn-eager), TFLOP/s cuda vs cudnn on dense plans:
//   image length      64          128          256          512         1024         2048
//   head dim  64   42 vs 62    102 vs 173   206 vs 314   271 vs 380   308 vs 427   335 vs 442
//   head dim  80   75 vs 59    124 vs 168   218 vs 282   272 vs 342   322 vs 373   382 vs 378
//   head dim 128   78 vs 91    123 vs 185   281 vs 365   352 vs 520   427 vs 553   485 vs 594
// cudnn leads everywhere but at head dims 65-80 at 64 tokens (cuda's sm80 kernel) and at 2048
// (a tie with the sm90 kernel; longer uniform images were not measured, and on qwen25vl-large4
// the sm90 kernel leads cudnn's ragged plan by 1.3x), where cuda keeps the call.
// At head dims 72 and 80 a finer sweep of unprepared calls on both sides (cuda-eager against
// cudnn-eager, H100, bench/results/h100-2026-12-07-s17-crossover-d80-eager.json, `VARIANTS_ONLY=1
// CROSSOVER=1 CROSSOVER_WORKLOADS=bench/crossover_d80_workloads.json`), cuda / cudnn:
//   image length    256   384   512   640   729  1024  1536  2048
//   head dim 72    0.87  0.99  0.88  1.01  1.10  0.92  1.07  1.04
//   head dim 80    0.76  1.03  0.83  0.97  1.08  0.91  1.11  1.01
// cuDNN's dense plans are fastest at powers of two; from 384 tokens the sm90 kernel ties or
// leads at every other length measured (siglip's 729 among them), so it keeps those.
#pragma once

#include <cstdint>

namespace visattn::cudnn {

inline constexpr int64_t kAutoMinMeanImageTokens = 96;
// At head dims 65-80 the sm90 kernel leads from this mean image length on.
inline constexpr int64_t kAutoSm90HeadDim80MeanImageTokens = 192;

// Whether `auto` prefers cudnn for a batch of `tokens` tokens in `images` non-empty images at
// `head_dim`; runs_sm90(): whether the cuda backend would run its sm90 kernel on it (asked
// only where the answer matters).
template <class RunsSm90>
bool auto_prefers_shape(int64_t tokens, int64_t images, int head_dim, RunsSm90&& runs_sm90) {
  if (images == 0 || tokens < kAutoMinMeanImageTokens * images) return false;
  const bool sm90_may_lead = head_dim > 64 && head_dim <= 80 && tokens >= kAutoSm90HeadDim80MeanImageTokens * images;
  return !(sm90_may_lead && runs_sm90());
}

// The same for a batch that runs dense (images of `length` tokens each).
inline constexpr int64_t kAutoMinDenseImageTokens = 64;
// At head dims 65-80 cuda leads below this length (the sm80 kernel) ...
inline constexpr int64_t kAutoDenseHeadDim80MinImageTokens = 128;
// ... and, where the sm90 kernel runs, from this one on but at powers of two below the next.
inline constexpr int64_t kAutoDenseSm90HeadDim80ImageTokens = 384;
inline constexpr int64_t kAutoDenseSm90HeadDim80AllImageTokens = 2048;

template <class RunsSm90>
bool auto_prefers_dense(int64_t length, int head_dim, RunsSm90&& runs_sm90) {
  if (length < kAutoMinDenseImageTokens) return false;
  if (head_dim <= 64 || head_dim > 80) return true;
  if (length < kAutoDenseHeadDim80MinImageTokens) return false;
  const bool power_of_two = (length & (length - 1)) == 0;
  const bool sm90_may_lead = length >= kAutoDenseSm90HeadDim80AllImageTokens ||
                             (length >= kAutoDenseSm90HeadDim80ImageTokens && !power_of_two);
  return !(sm90_may_lead && runs_sm90());
}

}  // namespace visattn::cudnn
