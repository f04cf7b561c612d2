// Uniform batches on cuDNN's dense kernel. A batch whose images all have one length (fixed-
// resolution towers: CLIP, SigLIP, InternViT tiles, the frames of one video) is a dense
// [images, heads, length, head_dim] tensor in a token-major layout, and cuDNN runs that with its
// dense SDPA kernel, faster than the ragged one (padding mask and per-image offsets; bench/
// NOTES.md, cuDNN entries 4 and 5). A dense plan holds the exact length and image count, so:
// - the image count is split into powers of two, one call each (at most 7 plans per length for
//   up to 64 images);
// - at most `dense_length_limit()` image lengths get dense plans in a process: a stream of ever
//   new lengths builds that many and then runs on the ragged plans of its buckets.
// Prepared batches always run ragged: CUDA graphs replay them with other lengths, and
// update_device writes lengths into their buffers that the host batch does not hold.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace visattn::cudnn {

inline constexpr int64_t kDenseLengths = 8;

// kDenseLengths, or VISATTN_CUDNN_DENSE_LENGTHS (0: every batch runs ragged).
int64_t dense_length_limit();

// The length all images of the batch have; 0 when lengths differ, or an image is empty.
int64_t uniform_length(std::span<const int32_t> cu_seqlens);

// The image counts of the dense calls for `images` images: powers of two, largest first.
std::vector<int64_t> dense_calls(int64_t images);

// Whether a [tokens, heads, ...] tensor with these strides (elements) is a dense tensor of
// images whose batch stride (length x token_stride) spans its heads: the layout the frontend
// accepts without overlapping batches. Head-major storage is not.
bool token_major(int64_t token_stride, int64_t head_stride, int heads, int64_t length);

}  // namespace visattn::cudnn
