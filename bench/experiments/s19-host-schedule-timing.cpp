// Host time of an unprepared cuda call's metadata (bench/NOTES.md CUDA entry 35): the two tile
// schedules and write_device_image, for the window, clip and mixed-length batch shapes. No GPU
// needed. It includes cuda_backend.cpp to reach its internal functions. Build from the repo root
// after a CMake build in build/ (for libvisattn.a):
//   g++ -std=c++20 -O2 -DNDEBUG -Isrc -Iinclude -I/usr/local/cuda/include \
//     bench/experiments/s19-host-schedule-timing.cpp -o /tmp/schedule_timing build/libvisattn.a \
//     -L/usr/local/cuda/lib64 -lcudart -lpthread -ldl && /tmp/schedule_timing
#include "backends/cuda/cuda_backend.cpp"

#include <chrono>
#include <cstdio>

int main() {
  using namespace visattn;
  using Clock = std::chrono::steady_clock;
  for (auto [images, length] : {std::pair<int, int>{1089, 64}, {64, 577}, {32, 2304}}) {
    std::vector<int32_t> cu(images + 1);
    for (int i = 0; i <= images; ++i) cu[i] = i * length;
    const VarlenBatch batch = VarlenBatch::from_cu_seqlens(std::span<const int32_t>(cu));
    const cuda::Layout layout = cuda::layout_for(batch);
    std::vector<char> staging(layout.bytes);
    constexpr int kReps = 2000;
    double schedules_us = 0, image_us = 0;
    for (int r = 0; r < kReps; ++r) {
      const auto t0 = Clock::now();
      const auto narrow = cuda::schedule_of(batch, 64), wide = cuda::schedule_of(batch, 128);
      const auto t1 = Clock::now();
      cuda::write_device_image(batch, layout, staging.data());
      const auto t2 = Clock::now();
      schedules_us += std::chrono::duration<double, std::micro>(t1 - t0).count();
      image_us += std::chrono::duration<double, std::micro>(t2 - t1).count();
    }
    std::printf("%d images x %d tokens: two schedules %.1f us, write_device_image %.1f us\n", images, length,
                schedules_us / kReps, image_us / kReps);
  }
}
