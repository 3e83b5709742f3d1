#include "kubernetes/device_plugin/plugin.h"

#include <sys/stat.h>

#include <thread>
#include <utility>

#include "kubernetes/device_plugin/base/log.h"

namespace gpuslice::kubernetes {

namespace {

constexpr auto kTick = std::chrono::milliseconds(250);
constexpr auto kRegisterTimeout = std::chrono::milliseconds(2000);

// Which file `path` is if it is a socket, else 0: its inode and change
// time together, since a new file may get the inode number of a deleted one.
uint64_t SocketIdentity(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return 0;
  uint64_t id = static_cast<uint64_t>(st.st_ino) * 1000003u;
  id ^= static_cast<uint64_t>(st.st_ctim.tv_sec) * 1000000000u +
        static_cast<uint64_t>(st.st_ctim.tv_nsec);
  return id == 0 ? 1 : id;
}

std::string Join(const std::string& dir, const std::string& name) {
  return !dir.empty() && dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

Plugin::Plugin(PluginOptions options, DaemonClient* allocate_daemon, DaemonClient* poll_daemon,
               PodResourcesSource* pods)
    : options_(std::move(options)),
      poll_daemon_(poll_daemon),
      allocator_(allocate_daemon, &book_, AllocatorOptions{options_.node, options_.cdi}),
      reconciler_(poll_daemon, pods, &book_,
                  ReconcilerOptions{options_.node, options_.decide, std::chrono::seconds(2),
                                    std::chrono::milliseconds(100), options_.annotations}) {
  deps_.table = &table_;
  deps_.allocator = &allocator_;
  deps_.book = &book_;
  deps_.daemon = allocate_daemon;
  deps_.after_allocate = [this] { reconciler_.Poke(); };
}

Plugin::~Plugin() {
  reconciler_.Stop();
  table_.Close();
  served_.clear();
}

std::string Plugin::KubeletSocket() const {
  return Join(options_.device_plugin_dir, "kubelet.sock");
}

void Plugin::Poll() {
  auto inv = poll_daemon_->Gpus();
  if (!inv.ok()) {
    // The last list stays advertised; the kubelet keeps its view.
    if (!daemon_error_logged_) LogWarn(inv.status().message() + " (keeping the last device list)");
    daemon_error_logged_ = true;
    return;
  }
  if (daemon_error_logged_) LogInfo("gpusliced answers again");
  daemon_error_logged_ = false;
  for (const NodeGpu& g : inv->gpus) {
    bool was_unhealthy = unhealthy_.count(g.uuid) > 0;
    if (!g.healthy && !was_unhealthy) {
      LogWarn(g.uuid + " is unhealthy (" + g.health_reason + "): its devices are Unhealthy");
      unhealthy_.insert(g.uuid);
    } else if (g.healthy && was_unhealthy) {
      LogInfo(g.uuid + " is healthy again");
      unhealthy_.erase(g.uuid);
    }
  }
  std::vector<Resource> changed = table_.Update(*inv);
  for (const Resource& r : changed) LogInfo(r.Name() + ": device list changed");
}

void Plugin::Serve(const Resource& resource, Served* served) {
  if (served->server == nullptr) served->server = std::make_unique<ResourceServer>(resource, deps_);
  std::string path = Join(options_.device_plugin_dir, SocketName(resource));
  if (core::Status s = served->server->Start(path); !s.ok()) {
    LogError(s.message());
    return;
  }
  served->registered = false;
  LogInfo(resource.Name() + ": serving on " + path);
}

void Plugin::SyncServers() {
  std::vector<Resource> want = table_.resources();
  for (auto it = served_.begin(); it != served_.end();) {
    if (std::find(want.begin(), want.end(), it->first) == want.end()) {
      LogInfo(it->first.Name() + ": no longer on this node; stopped serving it");
      it = served_.erase(it);  // Stops the server, removes its socket.
    } else {
      ++it;
    }
  }
  const uint64_t kubelet = SocketIdentity(KubeletSocket());
  for (const Resource& r : want) {
    Served& s = served_[r];
    // Our socket gone (the kubelet wiped the folder when it restarted) or
    // never made: serve on a new one, then register.
    if (s.server == nullptr || SocketIdentity(s.server->socket_path()) == 0) Serve(r, &s);
    if (s.server == nullptr || kubelet == 0) continue;
    if (s.registered && s.kubelet_identity == kubelet) continue;
    if (s.registered) LogInfo("kubelet.sock is new (the kubelet restarted): registering again");
    core::Status st = RegisterWithKubelet(KubeletSocket(), r, SocketName(r), kRegisterTimeout);
    if (!st.ok()) {
      LogWarn(r.Name() + ": " + st.message() + " (retrying)");
      s.registered = false;
      continue;
    }
    s.registered = true;
    s.kubelet_identity = kubelet;
    LogInfo(r.Name() + ": registered with the kubelet");
  }
}

void Plugin::Run(const std::atomic<bool>& stop) {
  // Nothing is served before the plugin's jobs are known again.
  bool recovered = false;
  auto next_poll = Clock::now();
  while (!stop.load()) {
    // Until the first list came, every tick.
    if (Clock::now() >= next_poll || !table_.has_inventory()) {
      Poll();
      next_poll = Clock::now() + options_.poll_interval;
    }
    if (!recovered) {
      auto n = reconciler_.Recover();
      if (!n.ok()) {
        std::this_thread::sleep_for(kTick);
        continue;
      }
      recovered = true;
      LogInfo("recovered " + std::to_string(*n) + " slices of this plugin from gpusliced");
      reconciler_.Start();
    }
    if (table_.has_inventory()) SyncServers();
    std::this_thread::sleep_for(kTick);
  }
  LogInfo("stopping");
  reconciler_.Stop();
  served_.clear();
}

}  // namespace gpuslice::kubernetes
