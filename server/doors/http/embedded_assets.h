// Files embedded in the binary at build time (server/doors/http/embed.cmake writes
// their definitions from server/doors/http/openapi.json and index.html).
#pragma once

#include <cstddef>

namespace dserve {

extern const char kEmbeddedOpenApiJson[];
extern const size_t kEmbeddedOpenApiJsonSize;
extern const char kEmbeddedIndexHtml[];
extern const size_t kEmbeddedIndexHtmlSize;

}  // namespace dserve
