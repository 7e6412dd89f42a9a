// creditloop/capture.hpp: recording what a runtime sees, for a replay: JSON Lines, format
// version 1 (a header, then a line per event: `plan`, `remove`, `request`, `dropped`), in files
// rotated by size. docs/capture.md gives the format.
//
//  - CaptureWriter formats and writes the lines. It reads no clock: every time is the caller's,
//    so the simulator writes captures of its virtual clock with it. One thread at a time.
//  - CaptureObserver is a RuntimeObserver: O(1), allocation-free work per event on the
//    dispatcher thread, fixed-size records handed to a thread of its own that writes them with a
//    CaptureWriter. The dispatcher never waits for it: a full hand-off drops the record and
//    counts it (a `dropped` line says how many).
//  - A capture that cannot write (no such directory, disk full) never stops the runtime: the
//    errors are counted, the first of a run is reported, and writing is tried again later.
//
// Why: docs/capture.md#how-it-works
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "creditloop/observer.hpp"
#include "creditloop/plan.hpp"
#include "creditloop/runtime.hpp"
#include "creditloop/units.hpp"

namespace creditloop {

/// The format version CaptureWriter writes.
inline constexpr int kCaptureVersion = 1;

/// Where a capture goes and how much of it is kept.
struct CaptureFiles {
  /// The current file. Older ones are PATH.1 (the newest) to PATH.{files-1}.
  std::string path;
  /// A file is rotated before a line would take it past this many bytes (a file always holds its
  /// header and at least one line, however small this is).
  std::uint64_t max_bytes = std::uint64_t{64} << 20;
  /// Files kept, the current one included: 1 keeps only PATH (rotation starts it afresh).
  std::uint32_t files = 4;
};

/// What every file's header says besides the participants.
struct CaptureSetup {
  Config config;                       // classes and plans
  std::optional<std::uint32_t> slots;  // the runtime's slot count; empty: a room test of its own
  Nanos origin = 0;                    // the instant, on the capture's clock, that is t = 0
  std::int64_t origin_unix_ns = 0;     // the wall clock at `origin`, in ns since 1970
};

/// The setup for a capture of a runtime built from `options`, starting now: its classes, plans
/// and room, and its clock (options.clock, or steady_clock) read together with the wall clock.
/// Call it before the Runtime takes the options. Allocates.
[[nodiscard]] CaptureSetup capture_setup(const RuntimeOptions& options);

/// How a capture is going. Counts since it started.
struct CaptureStats {
  std::uint64_t requests = 0;  // request lines written
  std::uint64_t lines = 0;     // every line written, headers included
  std::uint64_t files = 0;     // files started (the first, and one per rotation)
  std::uint64_t dropped = 0;   // records lost because the writer fell behind (observer only)
  std::uint64_t errors = 0;    // failed opens, writes and renames
  std::uint64_t lost = 0;      // lines not written because of an error
  std::string last_error;      // empty if none
};

/// Told of an I/O error, in one line naming the file (on the thread that writes). Empty: the
/// first error after a success is written to standard error; later ones are only counted.
using CaptureErrorHandler = std::function<void(const std::string&)>;

/// A request as a `request` line says it. Times are on the capture's clock.
struct CaptureRequest {
  std::string_view participant;
  Nanos arrive = 0;    // taken into the core (RequestHook::queued_at)
  Nanos dispatch = 0;  // the decision
  Nanos complete = 0;  // the completion applied
  ClassId out = 0;     // the class it went out under (k: unmetered)
  std::int64_t cost_nano = 0;
};

/// Formats capture lines and writes them to rotating files. Not thread-safe: one thread at a time
/// (stats() excepted). Every call may allocate and may make system calls (it buffers 64 KiB
/// and writes when that fills, at rotation, and on flush()); none blocks but on the disk.
class CaptureWriter {
 public:
  /// Moves an existing PATH aside as a rotation would (so a previous capture is kept), starts
  /// PATH with a header, and reports an error (without throwing) if it cannot. Throws
  /// std::invalid_argument when the path is empty, `files.files` is 0, or the setup's
  /// config is invalid.
  CaptureWriter(CaptureFiles files, CaptureSetup setup, CaptureErrorHandler on_error = {});
  /// Flushes and closes.
  ~CaptureWriter();
  CaptureWriter(const CaptureWriter&) = delete;
  CaptureWriter& operator=(const CaptureWriter&) = delete;

  /// A participant added, re-planned or scaled: its plan (a name of the setup's config), shares
  /// and fraction of the plan in millionths (units.hpp's kWholePlan: all of it) from `t` on.
  void plan(Nanos t, std::string_view participant, std::string_view plan, std::uint32_t shares,
            std::uint32_t scale = kWholePlan);
  void remove(Nanos t, std::string_view participant);
  void request(const CaptureRequest& request);
  /// `requests` records lost just before `t`.
  void dropped(Nanos t, std::uint64_t requests);
  /// Writes what is buffered.
  void flush();

  /// Any thread.
  [[nodiscard]] CaptureStats stats() const;
  [[nodiscard]] const CaptureFiles& files() const noexcept { return files_; }

 private:
  struct Member {
    std::string plan;
    std::uint32_t shares = 1;
    std::uint32_t scale = kWholePlan;
  };

  void line_done(Nanos t, bool request);
  void start_file();
  void rotate();
  bool write_out();
  void fail(const std::string& what, int error);
  void append_time(Nanos t);
  void append_header(std::string& out) const;

  CaptureFiles files_;
  CaptureSetup setup_;
  CaptureErrorHandler on_error_;
  int fd_ = -1;
  std::uint64_t file_bytes_ = 0;         // the current file's, buffered bytes included
  std::uint64_t header_bytes_ = 0;       // the current file's header
  std::uint64_t file_number_ = 0;        // the next file's `file`
  std::string buffer_;                   // formatted, not yet written
  std::uint64_t buffered_lines_ = 0;     // in buffer_
  std::uint64_t buffered_requests_ = 0;  // in buffer_
  std::string line_;                     // the line being formatted
  std::vector<std::pair<std::string, Member>> members_;  // registered, in order of addition
  std::optional<Nanos> retry_at_;                        // after an error: when to try a new file
  bool reported_ = false;           // an error was reported since the last success
  mutable std::mutex stats_mutex_;  // stats_ only
  CaptureStats stats_;
};

/// CaptureObserver's options.
struct CaptureOptions {
  CaptureFiles files;
  CaptureSetup setup;  // capture_setup(runtime options), usually
  /// Records the dispatcher may hand over before the writer catches up (rounded up to a power of
  /// two; about 64 bytes each). Beyond it, records are dropped and counted.
  std::size_t ring_records = std::size_t{1} << 16;
  /// Table sizes reserved up front: match RuntimeOptions'. More in flight than ever before, or a
  /// participant beyond these, grows a table (allocates), as the runtime's own tables do.
  std::size_t expected_in_flight = 1024;
  std::size_t expected_participants = 1024;
  /// How long the writer thread sleeps when it finds nothing to write.
  std::chrono::milliseconds idle_poll{10};
  CaptureErrorHandler on_error;
};

namespace detail {
struct CaptureRecord;
template <class Record, template <class> class Atomic>
class SpscRing;
}  // namespace detail

/// Records a runtime's participants and requests into a capture (see the file comment). Attach
/// it with RuntimeOptions::observer; it must outlive the runtime. It decides in batches
/// (follows_batches() is true), so the runtime keeps its fast path.
///
/// Cost on the dispatcher thread, per event: a dispatch writes its ticket's entry in a table
/// (arrival, instant, class, participant); a completion reads it and pushes one record; plan
/// events push one record (an add allocates a copy of the name). No allocation, no lock, no
/// system call in steady state.
class CaptureObserver final : public RuntimeObserver {
 public:
  /// Opens the capture (errors are reported, not thrown: the capture then retries) and starts
  /// the writer thread. Throws std::invalid_argument as CaptureWriter does. Allocates.
  explicit CaptureObserver(CaptureOptions options);
  /// close(), if not called.
  ~CaptureObserver() override;
  CaptureObserver(const CaptureObserver&) = delete;
  CaptureObserver& operator=(const CaptureObserver&) = delete;

  /// Writes everything handed over, a last `dropped` line if records were lost since the last
  /// one, flushes and stops the writer thread. Call it once the runtime has shut down (the
  /// observer must not be called afterwards). Any thread but the dispatcher; blocks.
  void close();

  /// Any thread.
  [[nodiscard]] CaptureStats stats() const;

  // ---- RuntimeObserver: the dispatcher thread ----
  [[nodiscard]] bool follows_batches() const override { return true; }
  void on_add(ParticipantId p, std::string_view name, PlanId plan, std::uint32_t shares,
              Nanos now) override;
  void on_remove(ParticipantId p) override;
  void on_replan(ParticipantId p, PlanId plan, std::uint32_t shares, Nanos now) override;
  void on_scale(ParticipantId p, std::uint32_t millionths, Nanos now) override;
  void on_submit(ParticipantId p, const RequestHook& request, Nanos now) override;
  void on_begin_turn(std::optional<ClassId> pass, Nanos now) override;
  void on_dispatch(std::size_t asked, std::size_t got, Nanos now) override;
  void on_visit(const Decision* dispatch, Ticket ticket, Nanos now) override;
  void on_complete(Ticket ticket, std::int64_t cost_nano, Nanos now) override;

 private:
  struct TicketEntry {
    std::uint64_t generation = 0;  // the runtime ticket's; 0: none
    Nanos arrive = 0;
    Nanos dispatch = 0;
    ParticipantId participant;
    ClassId out = 0;
  };
  struct Place {  // per ring place: the dispatcher's
    std::uint32_t generation = 0;
    std::uint64_t in_flight = 0;
  };
  struct Known {  // per participant: the writer thread's
    std::string name;
    PlanId plan = 0;
    std::uint32_t shares = 1;
    std::uint32_t scale = kWholePlan;
    std::uint64_t outstanding = 0;  // removed: its requests still to come
  };
  using Ring = detail::SpscRing<detail::CaptureRecord, std::atomic>;

  bool push(const detail::CaptureRecord& record, bool control);
  void write_loop();
  std::size_t write_some();
  void write(const detail::CaptureRecord& record);
  void seen(Nanos now) noexcept { last_now_ = now > last_now_ ? now : last_now_; }

  CaptureOptions options_;
  std::unique_ptr<Ring> ring_;
  // The dispatcher's.
  std::vector<TicketEntry> tickets_;
  std::vector<Place> places_;
  Nanos last_now_ = 0;
  std::uint64_t unreported_drops_ = 0;  // dropped since the last `dropped` record was handed over
  std::atomic<std::uint64_t> dropped_{0};  // written by the dispatcher only; read by stats()
  // The writer thread's (and close()'s, once it has joined it).
  std::unique_ptr<CaptureWriter> writer_;
  std::unordered_map<std::uint64_t, Known> known_;  // by ring place and generation
  std::uint64_t lost_unknown_ = 0;  // request records of a participant whose add was dropped
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // under wake_mutex_
  std::thread thread_;
  std::once_flag closed_;
};

}  // namespace creditloop
