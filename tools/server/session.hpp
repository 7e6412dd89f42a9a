// One client connection, as one coroutine on its lane's thread: reads a request's head under the
// size and time limits, authenticates it before reading any of its body, queues it, waits for its
// turn while watching whether the client is still there, serves it (work mode: on a worker; proxy
// mode: proxy.hpp), writes the answer, and keeps the connection alive while both sides want it.
//
// Every buffer that holds the client's bytes is bounded: the head by `limits.header_bytes`; what
// is read ahead of the parser (a chunk header, a trailer, a pipelined request) by the session's
// buffer, `header_bytes` + 16 KiB; a work-mode body by `limits.body_bytes`; a buffered proxied
// body by `limits.body_buffer_bytes` and a 16 KiB piece, the rest going to a temporary file
// (buffered_body.hpp); a streamed one passes through one scratch buffer of `limits.body_bytes`
// (at least 16 KiB, at most 64 KiB); what a closing connection still receives is dropped through
// 4 KiB.
#pragma once

#include <utility>  // before Asio's awaitable.hpp, which uses std::exchange without it

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "buffered_body.hpp"
#include "key_digest.hpp"
#include "last_holder.hpp"
#include "scheduler.hpp"

namespace creditloop::server {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;
using RequestHead = http::request_header<>;

class Backend;
class Server;
class Session;

/// A tenant's request from its arrival to its answer. Its session owns it, except once it was
/// abandoned while queued: then the runtime's hand-out (or hand-back) frees it.
struct Exchange : Pending {
  enum class Phase : std::uint8_t { queued, started, abandoned, handed_back };

  /// Whoever moves the exchange out of `queued` decides its fate: the dispatcher (`started`), its
  /// session (`abandoned`: the client left, or its queue timeout passed), a removal or a shutdown
  /// (`handed_back`). Returns whether this caller did. The acq_rel CAS pairs with the other
  /// parties' CAS: the winner's writes to the exchange are visible to a loser that then frees it.
  bool leave_queue(Phase to) noexcept {
    Phase from = Phase::queued;
    return phase.compare_exchange_strong(from, to, std::memory_order_acq_rel,
                                         std::memory_order_acquire);
  }
  [[nodiscard]] const RequestHead& head() const { return parser->get(); }
  /// Lets go of an abandoned exchange: its withdrawal (Server::withdraw) and the runtime's side
  /// (hand-out or hand-back) each hold it, and the last to let go frees it (last_holder.hpp).
  static void let_go(Exchange* e) noexcept {
    if (e->holders.let_go()) delete e;
  }

  std::atomic<Phase> phase{Phase::queued};
  /// Once abandoned: its withdrawal and the runtime's side (see let_go).
  LastHolder<> holders;
  std::shared_ptr<Session> session;
  /// The request's head, and (proxy mode) its body still to be read from the client.
  std::optional<http::request_parser<http::buffer_body>> parser;
  std::string request_id;
  std::string client_address;
  double cpu_ms = 0;   // work mode: CPU the request asked for
  double wait_ms = 0;  // work mode: modelled device wait
  /// The tenant's queue timeout when it arrived (0: none).
  std::chrono::milliseconds queue_timeout{0};
  /// Proxy mode with request buffering: the whole body, read before the request was queued, in
  /// memory or in a temporary file that goes with the exchange.
  BufferedBody body;
  bool body_buffered = false;
  /// The head's fields; the parser appends a chunked body's trailers after them.
  std::size_t header_fields = static_cast<std::size_t>(-1);
  /// The answer to write: work mode's, or the 503 of a request handed back.
  Response answer;
  /// The cost charged, once it was (Server::finish).
  std::optional<double> cost;
};

/// A response with the server's usual headers.
[[nodiscard]] Response make_response(const RequestHead& request, http::status status,
                                     std::string body,
                                     const char* content_type = "text/plain; charset=utf-8");

class Session : public std::enable_shared_from_this<Session> {
 public:
  /// What other threads tell a session about the exchange it waits on.
  enum Event : unsigned {
    dispatched = 1,  // proxy mode: its turn has come
    answered = 2,   // its answer is in Exchange::answer (work done, or handed back: the phase says)
    departed = 4,   // the client closed its connection
    timed_out = 8,  // the tenant's queue timeout passed
    watch_ended = 16,
  };

  /// `backend`: its lane's connections to the backend (proxy mode), null otherwise.
  Session(boost::asio::ip::tcp::socket socket, Server& server, bool admin, Backend* backend);
  ~Session();
  void start();
  /// Any thread.
  void notify(Event event);

 private:
  boost::asio::awaitable<void> serve();
  /// Serves requests until the connection ends or an answer ends it (then `lingering_`).
  boost::asio::awaitable<void> serve_exchanges();
  boost::asio::awaitable<bool> serve_admin(http::request_parser<http::empty_body>& head);
  boost::asio::awaitable<bool> serve_tenant(http::request_parser<http::empty_body>& head);
  /// Reads a body within limits.body_bytes, the body timeout and the request's deadline: kept in
  /// `e.body` when `keep` (proxy mode), else dropped (work mode). Answers and returns false when
  /// it is too large or malformed, or could not be kept (a disk error: 500); closes and returns
  /// false when the client left or was too slow.
  boost::asio::awaitable<bool> read_body(Exchange& e, bool keep);
  /// Waits until `e` is started; nothing then. Otherwise (its client left, its queue timeout
  /// passed, it was handed back) answers what there is to answer and returns whether the
  /// connection goes on.
  boost::asio::awaitable<std::optional<bool>> wait_turn(std::unique_ptr<Exchange>& e);
  /// After a fault between the submission of `e` and the end of its turn: closes the
  /// connection, and withdraws `e` if it is still queued, or else waits until the side that took
  /// it out of the queue is done with it (and, started, gives its slot back). Then `e` is the
  /// caller's to free.
  boost::asio::awaitable<void> reclaim(std::unique_ptr<Exchange>& e);
  /// Writes `res`; returns whether the connection goes on. `request_unread` ends it with the
  /// request not read whole: sending is shut down, and serve() lingers. An answer that ends the
  /// connection otherwise (not kept alive) lingers only if bytes were read ahead or wait unread.
  boost::asio::awaitable<bool> write(Response& res, bool request_unread);
  /// Ends the connection after an answer: lingers (serve() drains what still comes) when
  /// `request_unread` or bytes are read ahead or wait in the socket, else closes at once.
  void end_answered(bool request_unread);
  /// Answers a malformed or oversized head, then closes.
  boost::asio::awaitable<void> refuse_head(boost::beast::error_code ec);
  boost::asio::awaitable<unsigned> next_event();
  boost::asio::awaitable<void> stop_watching();
  /// Closes after the client had a chance to read the answer: reads and drops what the client
  /// still sends (a body never asked for), within limits.lingering_time and
  /// lingering_timeout and 1 MiB, so that closing with unread bytes does not reset the
  /// connection under the answer. Meanwhile the connection holds a 4 KiB buffer, nothing
  /// larger.
  boost::asio::awaitable<void> linger_close();
  void close();
  void on_event(unsigned events);
  void watch();
  /// The watch while the read-ahead is full: no byte can be taken, and a readable socket would
  /// wake an ordinary watch at once and for ever; a hang-up is looked for every 100 ms instead.
  void watch_for_hangup();
  void on_readable(boost::beast::error_code ec, std::uint64_t turn);
  [[nodiscard]] char* scratch(std::size_t& size);

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  Server& server_;
  Backend* backend_;
  config_file::KeyDigestMemo keys_;  // the bearer key this connection presented last
  const bool admin_;
  std::string address_;
  boost::asio::steady_timer wake_;
  boost::asio::steady_timer queue_timer_;
  boost::asio::steady_timer hangup_check_;
  unsigned events_ = 0;
  /// Every event the current exchange has had (see reclaim).
  unsigned turn_events_ = 0;
  bool watching_ = false;
  /// An answer ended the connection: serve() drains what the client still sends, then closes.
  bool lingering_ = false;
  /// Counts exchanges, so that a timer or watch of an earlier one cannot speak for this one.
  std::uint64_t turn_ = 0;
  /// When the request being read must be whole (limits.read_timeout from its first byte).
  Clock::time_point request_deadline_;
  std::unique_ptr<char[]> scratch_;  // allocated for a body, freed when the connection idles
  std::size_t scratch_size_ = 0;
};

}  // namespace creditloop::server
