// bench_runtime's floor (BM_Raw): a bare moodycamel hand-off, no scheduling at all.
#include <concurrentqueue/concurrentqueue.h>

#include <array>

#include "runtime_harness.hpp"

namespace creditloop::bench {

void BM_Raw(benchmark::State& state) {
  constexpr std::size_t kBulk = 32;
  const auto participants = static_cast<std::size_t>(state.range(1));
  Producers producers(1, participants);
  Gate* const gates = producers.gates();
  moodycamel::ConcurrentQueue<Request*> queue;
  moodycamel::ProducerToken producer_token(queue);
  moodycamel::ConsumerToken consumer_token(queue);
  auto submit = [&](Request& r) { queue.enqueue(producer_token, &r); };

  Stopwatch watch;
  for (auto _ : state) {
    watch.start();
    std::thread consumer([&] {
      std::array<Request*, kBulk> batch;
      unsigned idle = 0;
      for (std::size_t taken = 0; taken < kRequests;) {
        const std::size_t n = queue.try_dequeue_bulk(consumer_token, batch.begin(), kBulk);
        for (std::size_t i = 0; i < n; ++i) (void)start_request(*batch[i], gates);
        taken += n;
        if (n > 0) {
          idle = 0;
        } else if (++idle < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    });
    producers.iterate(submit);
    consumer.join();
    watch.stop();
  }
  producers.report(state);
  finish(state, "raw", watch, 2);
}

}  // namespace creditloop::bench
