// The device plugin against the kubelet's protocol: a real
// gpusliced on simulated GPUs, the real gpuslice-device-plugin process, and
// the test as the kubelet (fake_kubelet.h): it takes the plugin's
// registrations, drives every DevicePlugin RPC, answers the PodResources API
// with the pods it sets, and restarts. No kubelet runs here: what is tested
// is the protocol as the kubelet speaks it.
//
// Every wait polls a condition with a generous timeout (a busy 2-core
// machine slows these tests down; it must not break them).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "client/client.h"
#include "fake_kubelet.h"
#include "harness.h"
#include "kubernetes/device_plugin/base/devices.h"

namespace gpuslice::kubernetes {
namespace {

namespace fs = std::filesystem;
using e2e::Daemon;
using nlohmann::json;
using testing::FakeContainer;
using testing::FakeKubelet;

constexpr char kGpu[] = "gpuslice.dev/gpu";
constexpr char kMem[] = "gpuslice.dev/gpu-memory";
constexpr char kShare[] = "gpuslice.dev/gpu-share";
constexpr char kMigSmall[] = "gpuslice.dev/mig-1g.5gb";
constexpr char kMigBig[] = "gpuslice.dev/mig-3g.20gb";

// GPU 0 in MIG mode (one 3g.20gb, two 1g.5gb), GPUs 1 and 2 whole L4s.
constexpr char kGpus[] = "1xA100-40GB:mig=3g.20gb+1g.5gb*2,2xL4-24GB";

int Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
          const std::string& log) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  dup2(fd, 1);
  dup2(fd, 2);
  std::vector<char*> a, e;
  for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
  e.push_back(nullptr);
  execve(a[0], a.data(), e.data());
  _exit(127);
}

class DevicePluginE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(kGpus);
    ASSERT_TRUE(daemon_->Start()) << e2e::ReadFile(daemon_->dir() + "/daemon.log");
    plugin_dir_ = daemon_->dir() + "/device-plugins";
    fs::create_directories(plugin_dir_);
    kubelet_ = std::make_unique<FakeKubelet>(plugin_dir_, daemon_->dir() + "/pod-resources.sock");
    ASSERT_TRUE(kubelet_->Start());
    http_ = std::make_unique<client::Client>(daemon_->socket());
    auto gpus = http_->Call("GET", "/v1/gpus");
    ASSERT_TRUE(gpus.ok());
    for (const json& g : (*gpus)["gpus"]) uuids_.push_back(g["uuid"].get<std::string>());
    ASSERT_EQ(uuids_.size(), 3u);
  }

  void TearDown() override {
    StopPlugin(SIGKILL);
    kubelet_.reset();
    if (HasFailure()) {
      std::cerr << "--- plugin log ---\n" << e2e::ReadFile(PluginLog()) << "--- end ---\n";
    }
  }

  std::string PluginLog() const { return daemon_->dir() + "/plugin.log"; }

  // Starts the plugin and waits for the resources of kGpus to register.
  void StartPlugin(std::vector<std::string> extra = {}, const std::string& poll = "300ms") {
    std::vector<std::string> argv = {GPUSLICE_E2E_DEVICE_PLUGIN,
                                     "--socket",
                                     daemon_->socket(),
                                     "--device-plugin-dir",
                                     plugin_dir_,
                                     "--pod-resources-socket",
                                     daemon_->dir() + "/pod-resources.sock",
                                     "--poll-interval",
                                     poll,
                                     "--release-grace",
                                     "1s",
                                     "--node-name",
                                     "node-e2e"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    plugin_pid_ = Spawn(argv, daemon_->Env(), PluginLog());
    for (const char* r : {kGpu, kMem, kShare, kMigSmall, kMigBig}) {
      ASSERT_TRUE(kubelet_->WaitRegistered(r, std::chrono::seconds(60))) << r;
    }
  }

  void StopPlugin(int sig) {
    if (plugin_pid_ <= 0) return;
    kill(plugin_pid_, sig);
    waitpid(plugin_pid_, nullptr, 0);
    plugin_pid_ = -1;
  }

  std::vector<std::string> MemIds(int gpu, uint32_t from, uint32_t n) const {
    std::vector<std::string> out;
    for (uint32_t k = from; k < from + n; ++k) {
      out.push_back(FractionId(ResourceKind::kGpuMemory, uuids_[gpu], k));
    }
    return out;
  }
  std::vector<std::string> ShareIds(int gpu, uint32_t from, uint32_t n) const {
    std::vector<std::string> out;
    for (uint32_t k = from; k < from + n; ++k) {
      out.push_back(FractionId(ResourceKind::kGpuShare, uuids_[gpu], k));
    }
    return out;
  }

  grpc::Status Allocate(const std::string& resource, const std::vector<std::string>& ids,
                        v1beta1::AllocateResponse* out) {
    auto stub = kubelet_->Dial(resource);
    if (stub == nullptr) return grpc::Status(grpc::StatusCode::NOT_FOUND, "not registered");
    v1beta1::AllocateRequest req;
    auto* c = req.add_container_requests();
    for (const std::string& id : ids) c->add_devices_ids(id);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub->Allocate(&ctx, req, out);
  }

  // The job of a CDI name "gpuslice.dev/slice=ID".
  static uint64_t JobOf(const v1beta1::ContainerAllocateResponse& r) {
    if (r.cdi_devices_size() != 1) return 0;
    const std::string& name = r.cdi_devices(0).name();
    size_t eq = name.find('=');
    if (name.substr(0, eq) != "gpuslice.dev/slice") return 0;
    return std::stoull(name.substr(eq + 1));
  }

  json Job(uint64_t id) {
    auto j = http_->Call("GET", "/v1/jobs/" + std::to_string(id));
    return j.ok() ? *j : json();
  }

  bool WaitJob(uint64_t id, const std::function<bool(const json&)>& pred, int timeout_s = 30) {
    return Daemon::WaitFor(
        [&] {
          json j = Job(id);
          return !j.is_null() && pred(j);
        },
        timeout_s);
  }

  static bool Paused(const json& job) {
    for (const json& f : job.value("flags", json::array())) {
      if (f == "paused") return true;
    }
    return false;
  }

  // The first ListAndWatch answer of `resource`: ID -> health.
  std::map<std::string, std::string> ListOnce(const std::string& resource) {
    std::map<std::string, std::string> out;
    auto stub = kubelet_->Dial(resource);
    if (stub == nullptr) return out;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
    v1beta1::ListAndWatchResponse resp;
    if (reader->Read(&resp)) {
      for (const auto& d : resp.devices()) out[d.id()] = d.health();
    }
    ctx.TryCancel();
    return out;
  }

  std::unique_ptr<Daemon> daemon_;
  std::unique_ptr<FakeKubelet> kubelet_;
  std::unique_ptr<client::Client> http_;
  std::string plugin_dir_;
  std::vector<std::string> uuids_;
  int plugin_pid_ = -1;
};

TEST_F(DevicePluginE2e, RegistersEachResourceOfTheNodeAndListsItsDevices) {
  StartPlugin();
  std::set<std::string> names;
  for (const auto& r : kubelet_->registrations()) {
    names.insert(r.resource_name());
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().get_preferred_allocation_available()) << r.resource_name();
    EXPECT_TRUE(fs::exists(plugin_dir_ + "/" + r.endpoint())) << r.endpoint();
  }
  EXPECT_EQ(names, (std::set<std::string>{kGpu, kMem, kShare, kMigSmall, kMigBig}));

  auto stub = kubelet_->Dial(kMem);
  ASSERT_NE(stub, nullptr);
  grpc::ClientContext ctx;
  v1beta1::DevicePluginOptions options;
  ASSERT_TRUE(stub->GetDevicePluginOptions(&ctx, v1beta1::Empty(), &options).ok());
  EXPECT_TRUE(options.get_preferred_allocation_available());
  EXPECT_FALSE(options.pre_start_required());

  auto gpus = ListOnce(kGpu);  // The two L4s; the A100 is in MIG mode.
  EXPECT_EQ(gpus,
            (std::map<std::string, std::string>{{uuids_[1], "Healthy"}, {uuids_[2], "Healthy"}}));
  auto mem = ListOnce(kMem);
  EXPECT_EQ(mem.size(), 48u);  // 24 GiB each.
  EXPECT_EQ(mem.count(MemIds(2, 23, 1)[0]), 1u);
  EXPECT_EQ(ListOnce(kShare).size(), 200u);
  EXPECT_EQ(ListOnce(kMigSmall).size(), 2u);
  EXPECT_EQ(ListOnce(kMigBig).size(), 1u);
}

TEST_F(DevicePluginE2e, PreferredAllocationPutsAFractionOnOneGpu) {
  StartPlugin();
  auto stub = kubelet_->Dial(kMem);
  ASSERT_NE(stub, nullptr);
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  // Offered: 2 IDs on GPU 1 and 6 on GPU 2: only GPU 2 can hold 4.
  for (const std::string& id : MemIds(1, 0, 2)) c->add_available_deviceids(id);
  for (const std::string& id : MemIds(2, 10, 6)) c->add_available_deviceids(id);
  c->set_allocation_size(4);
  grpc::ClientContext ctx;
  v1beta1::PreferredAllocationResponse resp;
  ASSERT_TRUE(stub->GetPreferredAllocation(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.container_responses_size(), 1);
  std::vector<std::string> got(resp.container_responses(0).deviceids().begin(),
                               resp.container_responses(0).deviceids().end());
  EXPECT_EQ(got, MemIds(2, 10, 4));
}

// The preferred allocation follows what the daemon holds now, not the
// device list polled up to --poll-interval ago: a GPU just given whole to a
// pod is not where the next fraction goes (on a real kubelet the fraction's
// Allocate was then refused: the GPU was held whole).
TEST_F(DevicePluginE2e, PreferredAllocationAvoidsAGpuJustGivenAway) {
  StartPlugin({}, "1h");  // One device list, at start.
  v1beta1::AllocateResponse whole;
  grpc::Status s = Allocate(kGpu, {uuids_[1]}, &whole);
  ASSERT_TRUE(s.ok()) << s.error_message();
  auto stub = kubelet_->Dial(kMem);
  ASSERT_NE(stub, nullptr);
  v1beta1::PreferredAllocationRequest req;
  auto* c = req.add_container_requests();
  for (const std::string& id : MemIds(1, 0, 8)) c->add_available_deviceids(id);
  for (const std::string& id : MemIds(2, 0, 8)) c->add_available_deviceids(id);
  c->set_allocation_size(4);
  grpc::ClientContext ctx;
  v1beta1::PreferredAllocationResponse resp;
  ASSERT_TRUE(stub->GetPreferredAllocation(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.container_responses_size(), 1);
  std::vector<std::string> got(resp.container_responses(0).deviceids().begin(),
                               resp.container_responses(0).deviceids().end());
  EXPECT_EQ(got, MemIds(2, 0, 4));
  // A share too (it asks for no memory: the whole GPU's compute is taken).
  auto share_stub = kubelet_->Dial(kShare);
  ASSERT_NE(share_stub, nullptr);
  v1beta1::PreferredAllocationRequest share_req;
  auto* sc = share_req.add_container_requests();
  for (const std::string& id : ShareIds(1, 0, 100)) sc->add_available_deviceids(id);
  for (const std::string& id : ShareIds(2, 0, 100)) sc->add_available_deviceids(id);
  sc->set_allocation_size(70);
  grpc::ClientContext share_ctx;
  v1beta1::PreferredAllocationResponse share_resp;
  ASSERT_TRUE(share_stub->GetPreferredAllocation(&share_ctx, share_req, &share_resp).ok());
  ASSERT_EQ(share_resp.container_responses_size(), 1);
  std::vector<std::string> shares(share_resp.container_responses(0).deviceids().begin(),
                                  share_resp.container_responses(0).deviceids().end());
  EXPECT_EQ(shares, ShareIds(2, 0, 70));
}

TEST_F(DevicePluginE2e, MemoryAndShareOfAPodBecomeOneSliceReleasedWhenThePodGoes) {
  StartPlugin();
  v1beta1::AllocateResponse mem;
  grpc::Status s = Allocate(kMem, MemIds(1, 0, 4), &mem);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(mem.container_responses_size(), 1);
  uint64_t job = JobOf(mem.container_responses(0));
  ASSERT_NE(job, 0u) << mem.DebugString();
  json j = Job(job);
  EXPECT_EQ(j["mode"], "external");
  EXPECT_EQ(j["state"], "running");
  EXPECT_TRUE(Paused(j)) << j.dump();
  EXPECT_EQ(j["allocation"]["memory_bytes_per_gpu"], 4 * kGiB);
  EXPECT_EQ(j["allocation"]["gpu_uuids"], json::array({uuids_[1]}));
  EXPECT_EQ(j["labels"]["gpuslice.dev/device-plugin"], "node-e2e");

  // The share's preferred GPU is the memory's, just allocated and not yet
  // tied to a container, even when GPU 2 is offered first.
  {
    auto stub = kubelet_->Dial(kShare);
    ASSERT_NE(stub, nullptr);
    v1beta1::PreferredAllocationRequest req;
    auto* c = req.add_container_requests();
    for (int g : {2, 1}) {
      for (const std::string& id : ShareIds(g, 0, 100)) c->add_available_deviceids(id);
    }
    c->set_allocation_size(30);
    grpc::ClientContext ctx;
    v1beta1::PreferredAllocationResponse resp;
    ASSERT_TRUE(stub->GetPreferredAllocation(&ctx, req, &resp).ok());
    std::vector<std::string> got(resp.container_responses(0).deviceids().begin(),
                                 resp.container_responses(0).deviceids().end());
    EXPECT_EQ(got, ShareIds(1, 0, 30));
  }
  v1beta1::AllocateResponse share;
  s = Allocate(kShare, ShareIds(1, 0, 30), &share);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(share.container_responses_size(), 1);
  EXPECT_EQ(share.container_responses(0).cdi_devices_size(), 0);  // Nothing of its own.

  FakeContainer c;
  c.pod = "train";
  c.devices = {{kMem, MemIds(1, 0, 4)}, {kShare, ShareIds(1, 0, 30)}};
  kubelet_->SetPods({c});
  EXPECT_TRUE(WaitJob(job, [](const json& j) {
    return j["allocation"]["compute_milli"] == 300 && !Paused(j) &&
           j["labels"].value("pod", "") == "train" &&
           j["labels"].value("namespace", "") == "default" &&
           j["labels"].value("container", "") == "main";
  })) << Job(job).dump();

  kubelet_->SetPods({});  // The pod was deleted.
  EXPECT_TRUE(WaitJob(job, [](const json& j) { return j["state"] != "running"; }))
      << Job(job).dump();
}

TEST_F(DevicePluginE2e, WholeGpuAndMigAllocationsCreateTheirSlices) {
  StartPlugin();
  v1beta1::AllocateResponse gpu;
  grpc::Status s = Allocate(kGpu, {uuids_[2]}, &gpu);
  ASSERT_TRUE(s.ok()) << s.error_message();
  uint64_t gpu_job = JobOf(gpu.container_responses(0));
  ASSERT_NE(gpu_job, 0u);
  json j = Job(gpu_job);
  EXPECT_EQ(j["allocation"]["gpu_uuids"], json::array({uuids_[2]}));
  EXPECT_FALSE(Paused(j));

  auto migs = ListOnce(kMigSmall);
  ASSERT_EQ(migs.size(), 2u);
  std::string mig = migs.begin()->first;
  v1beta1::AllocateResponse m;
  s = Allocate(kMigSmall, {mig}, &m);
  ASSERT_TRUE(s.ok()) << s.error_message();
  uint64_t mig_job = JobOf(m.container_responses(0));
  ASSERT_NE(mig_job, 0u);
  EXPECT_EQ(Job(mig_job)["allocation"]["gpu_uuids"], json::array({mig}));
}

TEST_F(DevicePluginE2e, WithoutCdiAllocateAnswersEnvironmentMountsAndDevices) {
  StartPlugin({"--no-cdi"});
  v1beta1::AllocateResponse r;
  grpc::Status s = Allocate(kMem, MemIds(2, 0, 2), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto& c = r.container_responses(0);
  EXPECT_EQ(c.cdi_devices_size(), 0);
  ASSERT_EQ(c.envs().count("GPUSLICE_JOB_ID"), 1u) << r.DebugString();
  EXPECT_EQ(c.envs().at("CUDA_VISIBLE_DEVICES"), uuids_[2]);
  EXPECT_EQ(c.envs().count("LD_PRELOAD"), 1u);
  bool limits_read_only = false;
  for (const auto& m : c.mounts()) {
    if (m.host_path().find("limits") != std::string::npos) limits_read_only = m.read_only();
  }
  EXPECT_TRUE(limits_read_only) << r.DebugString();
  json job = Job(std::stoull(c.envs().at("GPUSLICE_JOB_ID")));
  EXPECT_EQ(job["allocation"]["memory_bytes_per_gpu"], 2 * kGiB);
}

TEST_F(DevicePluginE2e, AnAllocationThatDoesNotFitIsRefusedWithTheDaemonsMessage) {
  StartPlugin();
  v1beta1::AllocateResponse whole;
  ASSERT_TRUE(Allocate(kGpu, {uuids_[1]}, &whole).ok());
  // The kubelet would not hand out both, but a pod outside it may hold the
  // GPU: the daemon has the last word, and the kubelet gets its reason.
  v1beta1::AllocateResponse mem;
  grpc::Status s = Allocate(kMem, MemIds(1, 0, 4), &mem);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_FALSE(s.error_message().empty());
  // A fraction across two GPUs is refused by the plugin itself.
  std::vector<std::string> split = MemIds(2, 0, 1);
  split.push_back(MemIds(1, 5, 1)[0]);
  s = Allocate(kMem, split, &mem);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("one GPU"), std::string::npos) << s.error_message();
}

TEST_F(DevicePluginE2e, AnXidMakesTheGpusDevicesUnhealthy) {
  StartPlugin();
  auto stub = kubelet_->Dial(kGpu);
  ASSERT_NE(stub, nullptr);
  grpc::ClientContext ctx;
  // The daemon samples NVML health about once a second; the plugin polls it.
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(45));
  auto reader = stub->ListAndWatch(&ctx, v1beta1::Empty());
  v1beta1::ListAndWatchResponse resp;
  ASSERT_TRUE(reader->Read(&resp));
  // XID 79: the GPU fell off the bus (the simulator's fault injector).
  std::vector<std::string> env = daemon_->Env();
  int pid = Spawn({GPUSLICE_E2E_SIM_FAULT, "xid", "2", "79"}, env, daemon_->dir() + "/fault.log");
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_EQ(status, 0) << e2e::ReadFile(daemon_->dir() + "/fault.log");
  bool unhealthy = false;
  while (!unhealthy && reader->Read(&resp)) {
    for (const auto& d : resp.devices()) {
      if (d.id() == uuids_[2] && d.health() == "Unhealthy") unhealthy = true;
    }
  }
  EXPECT_TRUE(unhealthy) << "no Unhealthy device for " << uuids_[2];
  ctx.TryCancel();
  // Its memory and share IDs too.
  auto mem = ListOnce(kMem);
  EXPECT_EQ(mem[MemIds(2, 0, 1)[0]], "Unhealthy");
  EXPECT_EQ(mem[MemIds(1, 0, 1)[0]], "Healthy");
}

TEST_F(DevicePluginE2e, AKubeletRestartIsFollowedByANewRegistration) {
  StartPlugin();
  ASSERT_TRUE(kubelet_->Restart());  // Its folder wiped, a new kubelet.sock.
  for (const char* r : {kGpu, kMem, kShare, kMigSmall, kMigBig}) {
    EXPECT_TRUE(kubelet_->WaitRegistered(r, std::chrono::seconds(60))) << r;
  }
  for (const auto& r : kubelet_->registrations()) {
    EXPECT_TRUE(fs::exists(plugin_dir_ + "/" + r.endpoint())) << r.endpoint();
  }
  EXPECT_EQ(ListOnce(kGpu).size(), 2u);  // Served on its new socket.
  v1beta1::AllocateResponse r;
  EXPECT_TRUE(Allocate(kMem, MemIds(1, 0, 1), &r).ok());
}

TEST_F(DevicePluginE2e, ARestartedPluginRecoversItsSlicesAndSigtermRemovesItsSockets) {
  StartPlugin();
  v1beta1::AllocateResponse r;
  ASSERT_TRUE(Allocate(kMem, MemIds(1, 0, 20), &r).ok());
  uint64_t job = JobOf(r.container_responses(0));
  ASSERT_NE(job, 0u);
  FakeContainer c;
  c.pod = "keep";
  c.devices = {{kMem, MemIds(1, 0, 20)}};
  kubelet_->SetPods({c});
  ASSERT_TRUE(WaitJob(job, [](const json& j) { return !Paused(j); }));

  StopPlugin(SIGTERM);
  for (const auto& reg : kubelet_->registrations()) {
    EXPECT_FALSE(fs::exists(plugin_dir_ + "/" + reg.endpoint())) << reg.endpoint();
  }
  kubelet_->Restart();  // Fresh registrations to wait for.
  StartPlugin();
  // The job held by a pod stays; once the pod is gone, the restarted plugin
  // releases it: it knew the job without having created it.
  std::this_thread::sleep_for(std::chrono::seconds(2));  // Past the grace: it must stay.
  EXPECT_EQ(Job(job)["state"], "running");
  kubelet_->SetPods({});
  EXPECT_TRUE(WaitJob(job, [](const json& j) { return j["state"] != "running"; }))
      << Job(job).dump();
}

}  // namespace
}  // namespace gpuslice::kubernetes
