// The metrics listener of HttpServer (ListenMetrics): plain HTTP on TCP that
// serves only GET of the allowed read-only paths.

#include <gtest/gtest.h>

#include <atomic>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <thread>

#include "daemon/api/http_server.h"
#include "daemon/api/metrics.h"
#include "daemon/api/metrics_text.h"
#include "daemon/launch/launcher_fake.h"

namespace gpuslice::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct Reply {
  int status = 0;
  std::string content_type;
  std::string body;
};

class MetricsListenerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpuslice-mlisten-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ServiceOptions o;
    o.state_dir = dir_;
    service_ = std::make_unique<Service>(o, clock_, inventory_, launcher_, regions_);
    const core::Status started = service_->Start();
    ASSERT_TRUE(started.ok()) << started.ToString();
    doctor_ = std::make_unique<Doctor>(DoctorOptions{}, service_->inventory());
    api_ = std::make_unique<Api>(*service_, *doctor_);
    RegisterMetrics(*api_, *service_, MetricsOptions{"node-1", "0.1.0", 0});
    // Stands in for the status page (status_page.h registers the real one).
    api_->AddRoute("GET", "/status", [](const ApiRequest& r) {
      return ApiResponse{200, "status for " + r.caller.user, "text/html", {}};
    });
    server_ = std::make_unique<HttpServer>(io_, *api_, ServerOptions{});
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // One request from a client thread while this thread runs the server.
  Reply Fetch(const std::string& address, http::verb verb, const std::string& target) {
    Reply reply;
    std::atomic<bool> done{false};
    std::thread client([&] {
      try {
        asio::io_context cio;
        tcp::socket s(cio);
        const size_t colon = address.rfind(':');
        s.connect(tcp::endpoint(asio::ip::make_address(address.substr(0, colon)),
                                static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))));
        http::request<http::string_body> req(verb, target, 11);
        req.set(http::field::host, address);
        req.keep_alive(false);
        req.prepare_payload();
        http::write(s, req);
        beast::flat_buffer buf;
        http::response<http::string_body> resp;
        http::read(s, buf, resp);
        reply.status = resp.result_int();
        reply.content_type = std::string(resp[http::field::content_type]);
        reply.body = resp.body();
      } catch (const std::exception& e) {
        reply.body = e.what();
      }
      done = true;
    });
    while (!done) io_.run_for(std::chrono::milliseconds(10));
    client.join();
    io_.restart();
    return reply;
  }

  std::string dir_;
  FakeClock clock_;
  FakeInventory inventory_{InventorySnapshot{}};
  FakeLauncher launcher_;
  FakeRegionStore regions_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<Doctor> doctor_;
  std::unique_ptr<Api> api_;
  asio::io_context io_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(MetricsListenerTest, PortZeroPicksAFreePortAndServesMetricsWithoutCredentials) {
  auto address = server_->ListenMetrics("127.0.0.1:0", {"/metrics", "/status"});
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  EXPECT_EQ(address->rfind("127.0.0.1:", 0), 0u) << *address;
  EXPECT_NE(*address, "127.0.0.1:0");
  Reply r = Fetch(*address, http::verb::get, "/metrics");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, kMetricsContentType);
  EXPECT_NE(r.body.find("gpuslice_daemon_up 1"), std::string::npos);
  Reply status = Fetch(*address, http::verb::get, "/status");
  EXPECT_EQ(status.status, 200);
  EXPECT_EQ(status.body, "status for metrics-listener");
}

TEST_F(MetricsListenerTest, EverythingElseIsNotFoundAndNeverReachesTheApi) {
  auto address = server_->ListenMetrics("127.0.0.1:0", {"/metrics"});
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  // The API's own routes, job submission above all, are not reachable.
  EXPECT_EQ(Fetch(*address, http::verb::get, "/v1/jobs").status, 404);
  EXPECT_EQ(Fetch(*address, http::verb::get, "/v1/status").status, 404);
  EXPECT_EQ(Fetch(*address, http::verb::post, "/v1/jobs").status, 404);
  EXPECT_EQ(Fetch(*address, http::verb::post, "/metrics").status, 404);
  // Not in this listener's list, although the Api has it.
  EXPECT_EQ(Fetch(*address, http::verb::get, "/status").status, 404);
  EXPECT_TRUE(service_->reads().List(true).empty());
}

TEST_F(MetricsListenerTest, BadAddressesAreRefusedWithTheReason) {
  for (const char* bad :
       {"127.0.0.1", "localhost:9400", "127.0.0.1:99999", "127.0.0.1:x", ":9400"}) {
    auto r = server_->ListenMetrics(bad, {"/metrics"});
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().message();
  }
}

TEST_F(MetricsListenerTest, APortInUseIsUnavailable) {
  auto first = server_->ListenMetrics("127.0.0.1:0", {"/metrics"});
  ASSERT_TRUE(first.ok());
  HttpServer other(io_, *api_, ServerOptions{});
  auto second = other.ListenMetrics(*first, {"/metrics"});
  EXPECT_EQ(second.status().code(), core::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gpuslice::daemon
