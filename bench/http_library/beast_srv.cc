// Minimal Boost.Beast async keep-alive server returning the same fixed JSON
// body, N io_context threads: the other side of the measurement in
// docs/performance.md ("HTTP library"). g++ -O2 -std=c++17 beast_srv.cc -pthread
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <memory>
#include <thread>
#include <vector>
namespace beast = boost::beast; namespace http = beast::http; namespace net = boost::asio; using tcp = net::ip::tcp;
static const std::string kBody = R"([{"index":0,"score":0.98},{"index":1,"score":0.02}])";
struct Session : std::enable_shared_from_this<Session> {
  beast::tcp_stream stream; beast::flat_buffer buf; http::request<http::string_body> req; http::response<http::string_body> res;
  explicit Session(tcp::socket s) : stream(std::move(s)) {}
  void Read() { req = {}; http::async_read(stream, buf, req, [self = shared_from_this()](beast::error_code ec, size_t) { if (ec) return; self->Reply(); }); }
  void Reply() {
    res = {http::status::ok, req.version()}; res.set(http::field::content_type, "application/json"); res.keep_alive(req.keep_alive()); res.body() = kBody; res.prepare_payload();
    http::async_write(stream, res, [self = shared_from_this()](beast::error_code ec, size_t) { if (ec) return; if (!self->res.keep_alive()) return; self->Read(); });
  }
};
struct Listener : std::enable_shared_from_this<Listener> {
  net::io_context& ioc; tcp::acceptor acc;
  Listener(net::io_context& i, tcp::endpoint ep) : ioc(i), acc(net::make_strand(i)) { acc.open(ep.protocol()); acc.set_option(net::socket_base::reuse_address(true)); acc.bind(ep); acc.listen(); }
  void Accept() { acc.async_accept(net::make_strand(ioc), [self = shared_from_this()](beast::error_code ec, tcp::socket s) { if (!ec) std::make_shared<Session>(std::move(s))->Read(); self->Accept(); }); }
};
int main(int argc, char** argv) {
  int threads = argc > 2 ? atoi(argv[2]) : 2;
  net::io_context ioc(threads);
  std::make_shared<Listener>(ioc, tcp::endpoint(net::ip::make_address("127.0.0.1"), (unsigned short)atoi(argv[1])))->Accept();
  std::vector<std::thread> v; for (int i = 1; i < threads; ++i) v.emplace_back([&] { ioc.run(); }); ioc.run();
}
