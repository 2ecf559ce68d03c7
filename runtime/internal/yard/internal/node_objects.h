// What a node manager uses of the runtime's object store (runtime/src/objects): the node's shared
// memory store (ShmStore), its memory budget shared by the node's processes (NodeMemory) and the
// local copies of remote objects it keeps (LocalCopies). Workers and drivers reach the same store
// through the runtime itself.
//
// Part of the internal header set (yard/internal/); not installed.
#pragma once

#include "objects/local_copies.h"
#include "objects/node_memory.h"
#include "objects/shm_store.h"
