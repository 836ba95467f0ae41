// Minimal cpp-httplib keep-alive server returning a fixed JSON body: one side of
// the HTTP library measurement in docs/performance.md ("HTTP library").
// g++ -O2 -std=c++17 $(pkg-config --cflags cpp-httplib) httplib_srv.cc -lcpp-httplib -pthread
// ./a.out PORT THREADS   (NODELAY=1 turns TCP_NODELAY on)
#include <httplib.h>
#include <cstdio>
int main(int argc, char** argv) {
  int threads = argc > 2 ? atoi(argv[2]) : 64;
  httplib::Server s;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_keep_alive_max_count(1000000); if (getenv("NODELAY")) s.set_tcp_nodelay(true);
  const std::string body = R"([{"index":0,"score":0.98},{"index":1,"score":0.02}])";
  s.Post("/rerank", [&](const httplib::Request& req, httplib::Response& res) { res.set_content(body, "application/json"); });
  s.Get("/rerank", [&](const httplib::Request& req, httplib::Response& res) { res.set_content(body, "application/json"); });
  s.listen("127.0.0.1", atoi(argv[1]));
}
