// Thread sanitizer builds only (cmake/DserveSanitize.cmake links this into
// every binary): makes gRPC's completion hand-off visible to TSan.
//
// A gRPC C++ operation is prepared on one thread (the CallOpSet, the
// completion tag, the message: gRPC header code compiled into our binary,
// hence instrumented) and handed to gRPC core with grpc_call_start_batch(tag);
// its completion comes back on another thread (a "nexting" thread of the
// callback API, or the caller of a sync/async completion queue), which reads
// that state. The hand-off inside uninstrumented libgrpc is lock-free, so TSan
// sees no order between the two threads and reports gRPC's own fields (and
// whatever the completion callback reads) as races.
//
// These definitions come first in symbol lookup (an executable's symbols
// precede its libraries'), so libgrpc++'s calls land here: starting a batch
// releases on the tag's address, a completion returned for the tag acquires
// it, and then the real function runs (dlsym(RTLD_NEXT)). Nothing else
// changes. A callback that gRPC runs inline on its own thread, without going
// through grpc_completion_queue_next, is not covered.
#include <dlfcn.h>
#include <grpc/grpc.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

namespace {

template <typename Fn>
Fn Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_grpc_handoff: %s not found in the libraries after the executable\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  using Fn = grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*);
  static const Fn real = Real<Fn>("grpc_call_start_batch");
  __tsan_release(tag);
  return real(call, ops, nops, tag, reserved);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline, void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*);
  static const Fn real = Real<Fn>("grpc_completion_queue_next");
  grpc_event event = real(cq, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag, gpr_timespec deadline,
                                       void* reserved) {
  using Fn = grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*);
  static const Fn real = Real<Fn>("grpc_completion_queue_pluck");
  grpc_event event = real(cq, tag, deadline, reserved);
  if (event.type == GRPC_OP_COMPLETE) __tsan_acquire(event.tag);
  return event;
}

}  // extern "C"
