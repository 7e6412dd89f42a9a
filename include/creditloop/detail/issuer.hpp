// creditloop/detail/issuer.hpp: the identity each core and runtime stamps on what it issues.
//
// Tickets and participant ids carry it (ticket.hpp, participant.hpp) so that one handed to the
// wrong core or runtime is refused as unknown instead of naming a stranger there. Identities are
// drawn from one process-wide counter: two that live at once never share one unless 2^32 - 1
// cores and runtimes are constructed in between, and a server builds a few at its start.
#pragma once

#include <cstdint>

namespace creditloop::detail {

/// A fresh identity, never 0 (0 marks an id or ticket nobody issued). Thread-safe; no allocation.
[[nodiscard]] std::uint32_t next_issuer() noexcept;

}  // namespace creditloop::detail
