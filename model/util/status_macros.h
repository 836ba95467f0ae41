// Status helpers shared by every layer: RETURN_IF_ERROR and ASSIGN_OR_RETURN.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define DSERVE_CONCAT_INNER_(a, b) a##b
#define DSERVE_CONCAT_(a, b) DSERVE_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define RETURN_IF_ERROR(expr)                         \
  do {                                                \
    ::absl::Status dserve_status_ = (expr);           \
    if (!dserve_status_.ok()) return dserve_status_;  \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): expands to several statements (brace it
// under an if); evaluates `expr` (an absl::StatusOr<T>); on
// error returns its status, otherwise moves the value into `lhs`, which may
// be a declaration (`auto x`) or an existing variable.
#define ASSIGN_OR_RETURN(lhs, expr) \
  DSERVE_ASSIGN_OR_RETURN_IMPL_(DSERVE_CONCAT_(dserve_statusor_, __LINE__), lhs, expr)

#define DSERVE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
