// The runtime with your own worker threads: the dispatcher hands each decision to a sink (a
// callback on its thread, which must not block), your workers serve the requests and complete
// them from any thread with their real cost. Here the workers take jobs from a small
// mutex-guarded queue of your own; a server would use its I/O loop. The program checks that
// every request completed once and was charged, and exits non-zero otherwise.
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <creditloop/runtime.hpp>

namespace {

constexpr int kRequests = 3000;

// Your server's own work queue (the runtime does not care what it is).
class WorkQueue {
 public:
  void push(const creditloop::Decision& d) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(d);
    }
    ready_.notify_one();
  }
  // Blocks until items arrive or close(), then takes all of them; false once closed and empty.
  bool pop_all(std::vector<creditloop::Decision>& out) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || !items_.empty(); });
    out.assign(items_.begin(), items_.end());
    items_.clear();
    return !out.empty();
  }
  void close() {
    {
      std::lock_guard lock(mutex_);
      closed_ = true;
    }
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<creditloop::Decision> items_;
  bool closed_ = false;
};

struct Request : creditloop::RequestHook {
  int size = 0;
};

int run() {
  WorkQueue queue;
  // [readme]
  creditloop::RuntimeOptions options;
  options.config = creditloop::reference_config();
  options.slots = 16;
  // The sink runs on the dispatcher thread for each decision: hand the request over, never block
  // for long. d.out is the class it went out under, d.ticket what completes it.
  options.sink = [&queue](const creditloop::Decision& d) { queue.push(d); };
  creditloop::Runtime runtime(std::move(options));
  const creditloop::ParticipantId tenant = runtime.add("carol", "pro", /*shares=*/2).value();

  auto worker = [&] {
    creditloop::CompletionBatch batch(runtime);  // one hand-off for several completions
    std::vector<creditloop::Decision> taken;
    while (queue.pop_all(taken)) {
      for (const creditloop::Decision& d : taken) {
        const Request& request = static_cast<const Request&>(*d.request);
        const double cost = request.size * 0.01;  // what serving it really used, in credits
        // Wait-free; a stale or repeated ticket is refused and changes nothing.
        if (const creditloop::Status s = batch.add(d.ticket, cost); !s) std::abort();
      }
      batch.flush();  // before waiting again: the room comes back only with the completion
    }
  };
  // [/readme]

  std::vector<std::thread> workers;
  for (int i = 0; i < 2; ++i) workers.emplace_back(worker);
  std::vector<Request> requests(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    requests[static_cast<std::size_t>(i)].size = i % 5;
    if (!runtime.submit(tenant, requests[static_cast<std::size_t>(i)])) return 1;
  }
  // Drain: dispatch what is queued and wait until every request in flight was completed by the
  // workers, which are still running; then stop them.
  const creditloop::RequestList left = runtime.shutdown(creditloop::ShutdownMode::drain);
  queue.close();
  for (std::thread& t : workers) t.join();

  const creditloop::RuntimeSnapshot totals = runtime.snapshot();
  const std::optional<creditloop::ParticipantSnapshot> carol = runtime.snapshot(tenant);
  std::printf("completed %llu of %d\n", static_cast<unsigned long long>(totals.completed),
              kRequests);
  if (!left.empty() || totals.completed != kRequests) return 2;
  if (!carol || carol->stats.completed != kRequests || carol->stats.cost_charged <= 0) return 3;
  return 0;
}

}  // namespace

int main() { return run(); }
