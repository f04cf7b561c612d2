// Where `auto` runs a CUDA call on cudnn instead of cuda: the crossover measured on an H200
// (bench/results/h200-2026-12-02-crossover.json, `CROSSOVER=1 bash scripts/device_run.sh`).
// Uniform batches of 32768 tokens, bf16, TFLOP/s cuda vs cudnn:
//   image length      64          128          256          512         1024
//   head dim  64   43 vs 39    100 vs 137   143 vs 233   183 vs 312   207 vs 371
//   head dim  80   67 vs 40    107 vs 140   147 vs 224   178 vs 296   195 vs 348
//   head dim 128   84 vs 62    133 vs 197   184 vs 350   213 vs 455   230 vs 543
// cuda leads at 64 tokens (and on qwen25vl-window, 64-token windows: 64 vs 35), cudnn from 128
// on at every head dim; the threshold sits between the two.
#pragma once

#include <cstdint>

namespace visattn::cudnn {

inline constexpr int64_t kAutoMinMeanImageTokens = 96;

// Whether `auto` prefers cudnn for a batch of `tokens` tokens in `images` non-empty images.
inline bool auto_prefers_shape(int64_t tokens, int64_t images) {
  return images > 0 && tokens >= kAutoMinMeanImageTokens * images;
}

}  // namespace visattn::cudnn
