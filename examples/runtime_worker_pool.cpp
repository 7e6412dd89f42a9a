// The runtime with its built-in worker pool: producer threads submit, the dispatcher decides,
// the pool runs the handler and charges back the cost it returns. Two tenants, one `pro` and one
// `lite`, each fed by its own producer thread. The program checks that every request was served
// exactly once and its cost charged, and exits non-zero otherwise.
#include <atomic>
#include <cstdio>
#include <thread>
#include <vector>

#include <creditloop/runtime.hpp>

namespace {

constexpr int kPerTenant = 2000;

struct Job : creditloop::RequestHook {  // your request: the runtime links it, never copies it
  int work = 0;
  std::atomic<int> served{0};
};

int run() {
  // [readme]
  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();  // pro: P1+P2, lite: P2
  options.slots = 8;                                // room: at most 8 requests in flight
  options.workers = 2;                              // the pool runs the handler...
  // d.out is the class the request went out under, d.ticket the one the pool completes it with.
  options.handler = [](const creditloop::Decision& d) {
    Job& job = static_cast<Job&>(*d.request);
    job.served.fetch_add(1, std::memory_order_relaxed);  // read after shutdown() joined the pool
    return job.work * 0.001;  // ...and charges back the cost it returns, in credits
  };
  creditloop::Runtime runtime(std::move(options));  // starts the dispatcher and the workers

  const creditloop::ParticipantId alice = runtime.add("alice", "pro", /*shares=*/4).value();
  const creditloop::ParticipantId bob = runtime.add("bob", "lite", /*shares=*/1).value();
  // [/readme]

  std::vector<Job> jobs(2 * kPerTenant);
  auto produce = [&](creditloop::ParticipantId tenant, std::size_t first) {
    for (std::size_t i = first; i < first + kPerTenant; ++i) {
      jobs[i].work = static_cast<int>(i % 7);
      // [readme]
      // Any thread: lock-free and allocation-free; on error the job is still the caller's.
      if (const creditloop::Status s = runtime.submit(tenant, jobs[i]); !s) {
        std::fprintf(stderr, "submit: %s\n", creditloop::describe(s.error()).data());
      }
      // [/readme]
    }
  };
  std::thread alice_producer(produce, alice, 0);
  std::thread bob_producer(produce, bob, kPerTenant);
  alice_producer.join();
  bob_producer.join();

  // [readme]
  // Dispatch everything queued, wait for everything in flight, join the threads.
  const creditloop::RequestList left = runtime.shutdown(creditloop::ShutdownMode::drain);
  // [/readme]

  const creditloop::RuntimeSnapshot totals = runtime.snapshot();
  std::printf("dispatched %llu, completed %llu, P1 %llu, P2 %llu, P3 %llu\n",
              static_cast<unsigned long long>(totals.dispatched),
              static_cast<unsigned long long>(totals.completed),
              static_cast<unsigned long long>(totals.per_class[0].dispatched),
              static_cast<unsigned long long>(totals.per_class[1].dispatched),
              static_cast<unsigned long long>(totals.per_class[2].dispatched));
  if (!left.empty()) return 1;
  for (const Job& job : jobs) {
    if (job.served.load(std::memory_order_relaxed) != 1) return 2;
  }
  if (totals.completed != jobs.size() || runtime.handler_errors() != 0) return 3;
  return 0;
}

}  // namespace

int main() { return run(); }
