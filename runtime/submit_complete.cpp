// Submit and complete: what producers and completers run, on any thread, lock-free and
// allocation-free (runtime.hpp). Their other halves, the drains, are in dispatcher.cpp.
#include <atomic>
#include <cstdint>
#include <optional>

#include "creditloop/detail/hand_back.hpp"
#include "creditloop/runtime.hpp"
#include "internal/announce.hpp"
#include "internal/completion_handover.hpp"
#include "internal/runtime_impl.hpp"
#include "internal/unflushed_batches.hpp"

namespace creditloop {

Status Runtime::Impl::submit(ParticipantId p, RequestHook& request) noexcept {
  // Before anything touches the hook: a tagged address may not be ours to write (inbox.hpp).
  if (!Mailbox::Queue::packable(&request)) [[unlikely]]
    return Errc::unsupported_address;
  if (!detail::take_from_caller(request.held)) return Errc::already_queued;
  Mailbox* const mailbox = mailboxes_.find(p.place);
  const Mailbox::Submit outcome =
      mailbox == nullptr || p.generation == 0 || p.issuer != core_.issuer()
          ? Mailbox::Submit::refused
          : mailbox->submit(request, p.generation);
  if (outcome == Mailbox::Submit::refused) {
    // A push that retried before it was refused wrote the request's link; the next submit, which
    // may be another thread's (a racing second submit, refused until now), writes it too.
    detail::hand_back(request.held);
    // A push refused by shutdown's close reads the flag cleared, on any machine
    // (accepting_flag.hpp, tests/relacy/shutdown_flag_model).
    return accepting_.shut_down() ? Errc::shut_down : Errc::unknown_participant;
  }
  if (outcome == Mailbox::Submit::unsupported) [[unlikely]] {
    return Errc::unsupported_address;  // checked above already; the inbox keeps its own guard
  }
  CREDITLOOP_PROBE2(submit, p.place, p.generation);
  // The berth, not parker_: the parker's address is then loaded only where a notify needs it.
  detail::announce_submit(outcome, *mailbox, activations_, stale_listings_, parking_);
  return {};
}

Status Runtime::Impl::claim(Ticket ticket, std::int64_t cost_nano, TicketRecord*& record) noexcept {
  if (cost_nano < 0 || cost_nano > kMaxCostNano) return Errc::bad_cost;
  TicketRecord* const r = tickets_.find(ticket.index);
  // The runtime's tickets carry its core's identity: one of another runtime names a stranger.
  if (r == nullptr || ticket.issuer != core_.issuer()) return Errc::unknown_ticket;
  // The cost is written only if the claim won: the record is this thread's until published.
  switch (detail::claim_completion<detail::MemberCost<TicketRecord>>(*r, ticket.generation,
                                                                     cost_nano)) {
    case detail::TicketCell<std::atomic>::Claim::claimed:
      break;
    case detail::TicketCell<std::atomic>::Claim::unknown:
      return Errc::unknown_ticket;
    case detail::TicketCell<std::atomic>::Claim::stale:
      return Errc::stale_ticket;
  }
  // The request is its caller's from here on; the dispatcher will not touch it (retire_nano()).
  detail::hand_back(r->request->held);
  CREDITLOOP_PROBE3(complete, ticket.index, ticket.generation, cost_nano);
  record = r;
  return {};
}

// ---- Runtime ------------------------------------------------------------------------------------

Status Runtime::submit(ParticipantId p, RequestHook& request) noexcept {
  return impl_->submit(p, request);
}

Status Runtime::complete(Ticket ticket, double cost) noexcept {
  const std::optional<std::int64_t> nano = to_nano_credits(cost, kMaxCost);
  if (!nano) return Errc::bad_cost;
  return complete_nano(ticket, *nano);
}

Status Runtime::complete_nano(Ticket ticket, std::int64_t cost_nano) noexcept {
  detail::TicketRecord* record = nullptr;
  const Status claimed = impl_->claim(ticket, cost_nano, record);
  if (claimed) impl_->publish(*record, *record);
  return claimed;
}

// ---- CompletionBatch ----------------------------------------------------------------------------

CompletionBatch::CompletionBatch(Runtime& runtime) noexcept : impl_(runtime.impl_.get()) {}
CompletionBatch::~CompletionBatch() { flush(); }

Status CompletionBatch::add(Ticket ticket, double cost) noexcept {
  const std::optional<std::int64_t> nano = to_nano_credits(cost, kMaxCost);
  if (!nano) return Errc::bad_cost;
  return add_nano(ticket, *nano);
}

Status CompletionBatch::add_nano(Ticket ticket, std::int64_t cost_nano) noexcept {
  detail::TicketRecord* record = nullptr;
  const Status claimed = impl_->claim(ticket, cost_nano, record);
  if (!claimed) return claimed;
  if (first_ == nullptr) detail::unflushed_batches.enter(impl_);  // shutdown() checks it
  detail::chain(first_, last_, *record);                          // published by flush()
  ++count_;
  return {};
}

void CompletionBatch::flush() noexcept {
  if (first_ == nullptr) return;
  impl_->publish(*first_, *last_);
  detail::unflushed_batches.leave(impl_);  // compares the address only: the runtime may be gone
  first_ = last_ = nullptr;
  count_ = 0;
}

}  // namespace creditloop
