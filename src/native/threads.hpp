// Running independent pieces of work on threads of their own.
#pragma once

#include <cstddef>
#include <exception>
#include <thread>
#include <vector>

namespace cntkio {

// Runs work(k) for k in [0, runs), k = 0 on the calling thread and the others on threads of their own; the first
// exception a run threw is rethrown once all have ended.
template <class Work>
void on_threads(size_t runs, const Work& work) {
  if (runs == 0) return;
  std::vector<std::exception_ptr> failures(runs);
  auto guarded = [&](size_t k) {
    try {
      work(k);
    } catch (...) {
      failures[k] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  for (size_t k = 1; k < runs; ++k) threads.emplace_back(guarded, k);
  guarded(0);
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

}  // namespace cntkio
