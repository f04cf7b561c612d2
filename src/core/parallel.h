// A minimal fork-join loop over independent work items.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace visattn {

// Threads to use: VISATTN_NUM_THREADS, else OMP_NUM_THREADS, else the hardware count.
int default_num_threads();

// Calls body(i) for every i in [0, count), items handed out dynamically in order, on up to
// num_threads threads: the caller and workers of a process-wide pool (kept alive so their
// thread_local scratch is reused across calls). Safe to call from several threads at once.
// The first exception is rethrown.
void parallel_for(int64_t count, int num_threads, const std::function<void(int64_t)>& body);

// As above, but with `lookahead` each thread claims its next item before running the current
// one and passes it as body(item, next) (next = -1 when there is none, and always without
// lookahead), so the body can prefetch what the thread reads next while it computes. The
// price: at the end a thread may hold an item another thread could have started.
void parallel_for(int64_t count, int num_threads, bool lookahead,
                  const std::function<void(int64_t item, int64_t next)>& body);

}  // namespace visattn
