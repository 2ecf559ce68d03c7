// The Gloo backend: CPU buffers over TCP, rendezvous through GroupStore.
#pragma once

#include <memory>

#include "yard/collective.h"

namespace yard::collective {

std::unique_ptr<Communicator> create_gloo(const GroupSpec& spec);

}  // namespace yard::collective
