// CUDA graphs: explicit kernel nodes, stream capture, instantiate, launch.

#include <algorithm>
#include <cstring>

#include "sim/driver/driver.h"

using namespace gpuslice::sim::driver;  // NOLINT: entry points are extern "C".

namespace {

CUresult ValidGraph(CUgraph handle, Graph** out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Graph* g = reinterpret_cast<Graph*>(handle);
  if (g == nullptr || Driver::Get().graphs.count(g) == 0) return CUDA_ERROR_INVALID_VALUE;
  *out = g;
  return CUDA_SUCCESS;
}

CUresult AddNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t ndeps,
                 std::unique_ptr<GraphNode> node) {
  Driver& drv = Driver::Get();
  Graph* g = nullptr;
  if (CUresult r = ValidGraph(graph, &g); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (ndeps > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ndeps; ++i) {
    GraphNode* d = reinterpret_cast<GraphNode*>(deps[i]);
    if (drv.graph_nodes.count(d) == 0 || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
    node->deps.push_back(d);
  }
  node->graph = g;
  *out = reinterpret_cast<CUgraphNode>(node.get());
  drv.graph_nodes.insert(node.get());
  g->nodes.push_back(std::move(node));
  return CUDA_SUCCESS;
}

CUresult KernelNode(const CUDA_KERNEL_NODE_PARAMS& p, std::unique_ptr<GraphNode>* out) {
  Driver& drv = Driver::Get();
  Function* fn = reinterpret_cast<Function*>(p.func);
  if (fn == nullptr || drv.functions.count(fn) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto node = std::make_unique<GraphNode>();
  node->type = CU_GRAPH_NODE_TYPE_KERNEL;
  Launch& l = node->launch;
  l.func = fn;
  l.grid[0] = p.gridDimX;
  l.grid[1] = p.gridDimY;
  l.grid[2] = p.gridDimZ;
  l.block[0] = p.blockDimX;
  l.block[1] = p.blockDimY;
  l.block[2] = p.blockDimZ;
  l.shared_mem = p.sharedMemBytes;
  uint64_t threads = uint64_t{l.block[0]} * l.block[1] * l.block[2];
  if (l.grid[0] * uint64_t{l.grid[1]} * l.grid[2] == 0 || threads == 0 || threads > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Parameters are read now, as the driver copies them into the node.
  l.cost_ns = KernelCostNs(l, p.kernelParams, p.extra, fn->module->ctx->device->info.sm_count);
  *out = std::move(node);
  return CUDA_SUCCESS;
}

}  // namespace

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  auto* g = new Graph();
  Driver::Get().graphs.insert(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph handle) {
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Graph* g = nullptr;
  if (CUresult r = ValidGraph(handle, &g); r != CUDA_SUCCESS) return r;
  for (auto& n : g->nodes) drv.graph_nodes.erase(n.get());
  drv.graphs.erase(g);
  delete g;
  return CUDA_SUCCESS;
}

// CUDA_KERNEL_NODE_PARAMS is the _v2 struct from CUDA 12.0 on, _v1 before.
static CUresult AddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                              size_t ndeps, const CUDA_KERNEL_NODE_PARAMS* params) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  std::unique_ptr<GraphNode> node;
  if (CUresult r = KernelNode(*params, &node); r != CUDA_SUCCESS) return r;
  return AddNode(out, graph, deps, ndeps, std::move(node));
}

#if CUDA_VERSION >= 12000
GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph,
                                                            const CUgraphNode* deps, size_t ndeps,
                                                            const CUDA_KERNEL_NODE_PARAMS* params) {
  return AddKernelNode(out, graph, deps, ndeps, params);
}
#endif

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* out, CUgraph graph,
                                                         const CUgraphNode* deps, size_t ndeps,
                                                         const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_KERNEL_NODE_PARAMS p{};
  std::memcpy(&p, params, sizeof(*params));  // v1 is a prefix of v2 (or v2 is v1).
  return AddKernelNode(out, graph, deps, ndeps, &p);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* out, CUgraph graph,
                                                        const CUgraphNode* deps, size_t ndeps) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  return AddNode(out, graph, deps, ndeps, std::make_unique<GraphNode>());
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes,
                                                    size_t* count) {
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Graph* g = nullptr;
  if (CUresult r = ValidGraph(graph, &g); r != CUDA_SUCCESS) return r;
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  size_t n = std::min(*count, g->nodes.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(g->nodes[i].get());
  for (size_t i = n; i < *count; ++i) nodes[i] = nullptr;
  *count = n;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph,
                                                                unsigned long long flags) {
  Context* ctx = nullptr;
  if (CUresult r = CurrentActiveContext(&ctx); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Graph* g = nullptr;
  if (CUresult r = ValidGraph(graph, &g); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (flags & ~0xfull) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Kahn's algorithm; nodes were added after their dependencies, so the
  // insertion order is already topological, but explicit edges may be later.
  auto* exec = new GraphExec();
  exec->ctx = ctx;
  std::set<GraphNode*> done;
  while (done.size() < g->nodes.size()) {
    bool progress = false;
    for (auto& n : g->nodes) {
      if (done.count(n.get())) continue;
      if (std::all_of(n->deps.begin(), n->deps.end(),
                      [&](GraphNode* d) { return done.count(d); })) {
        exec->order.push_back(*n);
        done.insert(n.get());
        progress = true;
      }
    }
    if (!progress) {
      delete exec;
      return CUDA_ERROR_INVALID_VALUE;  // A cycle.
    }
  }
  drv.graph_execs.insert(exec);
  *out = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* out, CUgraph graph,
                                                          CUgraphNode* error_node, char* log,
                                                          size_t log_size) {
  if (error_node != nullptr) *error_node = nullptr;
  if (log != nullptr && log_size > 0) log[0] = '\0';
  return cuGraphInstantiateWithFlags(out, graph, 0);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec handle) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  GraphExec* e = reinterpret_cast<GraphExec*>(handle);
  if (e == nullptr || Driver::Get().graph_execs.count(e) == 0) return CUDA_ERROR_INVALID_VALUE;
  Driver::Get().graph_execs.erase(e);
  delete e;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphUpload(CUgraphExec handle, CUstream stream) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  GraphExec* e = reinterpret_cast<GraphExec*>(handle);
  if (e == nullptr || Driver::Get().graph_execs.count(e) == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  return ResolveStreamLocked(stream, &s);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec handle, CUstream stream) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  GraphExec* e = reinterpret_cast<GraphExec*>(handle);
  if (e == nullptr || drv.graph_execs.count(e) == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(stream, &s); r != CUDA_SUCCESS) return r;
  for (const GraphNode& n : e->order) {
    Work w;
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      w.kind = Work::Kind::kKernel;
      w.cost_ns = n.launch.cost_ns;
      if (CUresult r = SubmitLocked(s, std::move(w), &n.launch); r != CUDA_SUCCESS) return r;
    } else if (n.action) {
      w.action = n.action;
      if (CUresult r = SubmitLocked(s, std::move(w), nullptr); r != CUDA_SUCCESS) return r;
    }
  }
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream handle,
                                                            CUstreamCaptureMode mode) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  if (s == s->ctx->null_stream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture_graph != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* g = new Graph();
  drv.graphs.insert(g);
  s->capture_graph = g;
  s->capture_invalidated = false;
  s->capture_mode = mode;
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream handle) {
  return cuStreamBeginCapture_v2(handle, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream handle, CUgraph* out) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  Driver& drv = Driver::Get();
  std::lock_guard<DriverMutex> lock(drv.mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s->capture_graph == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = s->capture_graph;
  s->capture_graph = nullptr;
  if (s->capture_invalidated) {
    for (auto& n : g->nodes) drv.graph_nodes.erase(n.get());
    drv.graphs.erase(g);
    delete g;
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

GPUSLICE_CU_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream handle,
                                                        CUstreamCaptureStatus* status) {
  if (CUresult r = CheckInit(); r != CUDA_SUCCESS) return r;
  std::lock_guard<DriverMutex> lock(Driver::Get().mu);
  Stream* s = nullptr;
  if (CUresult r = ResolveStreamLocked(handle, &s); r != CUDA_SUCCESS) return r;
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = s->capture_graph == nullptr ? CU_STREAM_CAPTURE_STATUS_NONE
            : s->capture_invalidated    ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                        : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}

// Entry points with the same signature and behaviour: legacy names whose
// _v2 changed nothing visible here, and the per-thread-default-stream
// variants (the simulator gives every thread the legacy default stream).
GPUSLICE_CU_ALIAS(cuGraphUpload_ptsz, cuGraphUpload)
GPUSLICE_CU_ALIAS(cuGraphLaunch_ptsz, cuGraphLaunch)
GPUSLICE_CU_ALIAS(cuStreamBeginCapture_ptsz, cuStreamBeginCapture)
GPUSLICE_CU_ALIAS(cuStreamBeginCapture_v2_ptsz, cuStreamBeginCapture_v2)
GPUSLICE_CU_ALIAS(cuStreamEndCapture_ptsz, cuStreamEndCapture)
GPUSLICE_CU_ALIAS(cuStreamIsCapturing_ptsz, cuStreamIsCapturing)
