#include "kubernetes/device_plugin/base/flags.h"

#include <functional>

#include "core/units.h"

namespace gpuslice::kubernetes {

namespace {

struct FlagSpec {
  const char* name;
  bool takes_value;
  std::function<core::Status(Flags&, const std::string&)> set;
};

core::Status SetDuration(std::chrono::milliseconds* out, const std::string& name,
                         const std::string& value) {
  auto d = core::ParseDuration(value);
  if (!d.ok()) return d.status().WithContext(name);
  *out = *d;
  return core::Status::Ok();
}

core::Status NonEmpty(std::string* out, const std::string& name, const std::string& value) {
  if (value.empty()) return core::InvalidArgumentError(name + ": empty");
  *out = value;
  return core::Status::Ok();
}

const std::vector<FlagSpec>& Table() {
  static const std::vector<FlagSpec> table = {
      {"--socket", true,
       [](Flags& f, const std::string& v) { return NonEmpty(&f.socket, "--socket", v); }},
      {"--device-plugin-dir", true,
       [](Flags& f, const std::string& v) {
         return NonEmpty(&f.device_plugin_dir, "--device-plugin-dir", v);
       }},
      {"--pod-resources-socket", true,
       [](Flags& f, const std::string& v) {
         return NonEmpty(&f.pod_resources_socket, "--pod-resources-socket", v);
       }},
      {"--no-cdi", false,
       [](Flags& f, const std::string&) {
         f.cdi = false;
         return core::Status::Ok();
       }},
      {"--poll-interval", true,
       [](Flags& f, const std::string& v) {
         return SetDuration(&f.poll_interval, "--poll-interval", v);
       }},
      {"--release-grace", true,
       [](Flags& f, const std::string& v) {
         return SetDuration(&f.release_grace, "--release-grace", v);
       }},
      {"--node-name", true,
       [](Flags& f, const std::string& v) { return NonEmpty(&f.node_name, "--node-name", v); }},
      {"--kube-api", true,
       [](Flags& f, const std::string& v) { return NonEmpty(&f.kube_api, "--kube-api", v); }},
      {"--kube-token-file", true,
       [](Flags& f, const std::string& v) {
         return NonEmpty(&f.kube_token_file, "--kube-token-file", v);
       }},
      {"--kube-ca-file", true,
       [](Flags& f, const std::string& v) {
         return NonEmpty(&f.kube_ca_file, "--kube-ca-file", v);
       }},
      {"--no-kube-api", false,
       [](Flags& f, const std::string&) {
         f.no_kube_api = true;
         return core::Status::Ok();
       }},
      {"--help", false,
       [](Flags& f, const std::string&) {
         f.help = true;
         return core::Status::Ok();
       }},
  };
  return table;
}

}  // namespace

core::Result<Flags> ParseFlags(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool inline_value = false;
    if (size_t eq = name.find('='); name.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (name == "-h") name = "--help";
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : Table()) {
      if (name == s.name) spec = &s;
    }
    if (spec == nullptr) {
      return core::InvalidArgumentError("unknown flag '" + args[i] + "' (see --help)");
    }
    if (spec->takes_value && !inline_value) {
      if (i + 1 >= args.size()) return core::InvalidArgumentError(name + ": needs a value");
      value = args[++i];
    } else if (!spec->takes_value && inline_value) {
      return core::InvalidArgumentError(name + " takes no value");
    }
    GPUSLICE_RETURN_IF_ERROR(spec->set(flags, value));
  }
  if (flags.poll_interval < std::chrono::milliseconds(100)) {
    return core::InvalidArgumentError("--poll-interval: at least 100ms");
  }
  return flags;
}

std::string Usage() {
  return "usage: gpuslice-device-plugin [flags]\n"
         "\n"
         "The Kubernetes device plugin of gpuslice: advertises gpuslice.dev/gpu, gpu-memory\n"
         "(GiB), gpu-share (percent) and mig-<profile> to the kubelet and creates each\n"
         "container's slice in gpusliced.\n"
         "\n"
         "  --socket PATH                gpusliced's socket (default $GPUSLICE_SOCKET,\n"
         "                               else /run/gpuslice/gpuslice.sock)\n"
         "  --device-plugin-dir DIR      the kubelet's device plugin folder\n"
         "                               (default /var/lib/kubelet/device-plugins/)\n"
         "  --pod-resources-socket PATH  the kubelet's PodResources API\n"
         "                               (default /var/lib/kubelet/pod-resources/kubelet.sock)\n"
         "  --no-cdi                     answer Allocate with environment, mounts and device\n"
         "                               nodes instead of CDI device names\n"
         "  --poll-interval DURATION     how often to read the GPUs and their health (5s)\n"
         "  --release-grace DURATION     how long a slice no container holds is kept (30s)\n"
         "  --node-name NAME             this node's name in job labels (default $NODE_NAME,\n"
         "                               else the host name)\n"
         "  --kube-api URL               the API server, to read pods' gpuslice.dev/priority\n"
         "                               (default: in-cluster when KUBERNETES_SERVICE_HOST is set)\n"
         "  --kube-token-file PATH       bearer token (default: the service account's)\n"
         "  --kube-ca-file PATH          CA bundle (default: the service account's)\n"
         "  --no-kube-api                do not read pods' annotations\n";
}

}  // namespace gpuslice::kubernetes
