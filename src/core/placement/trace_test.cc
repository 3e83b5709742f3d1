#include "core/placement/trace.h"

#include <gtest/gtest.h>

#include <string>

namespace gpuslice::core {
namespace {

constexpr char kNodeHeader[] = "sn,cpu_milli,memory_mib,gpu,model\n";
constexpr char kTaskHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

std::string Tasks(const std::string& rows) { return kTaskHeader + rows; }

TEST(ParseTraceNodes, ParsesRows) {
  std::string text = std::string(kNodeHeader) +
                     "openb-node-0000,64000,262144,2,P100\r\n"
                     "openb-node-0001,96000,393216,8,G2\n"
                     "\n"
                     "cpu-node,32000,65536,0,\n";
  Result<std::vector<TraceNode>> r = ParseTraceNodes(text, "nodes.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].name, "openb-node-0000");
  EXPECT_EQ((*r)[0].cpu_milli, 64000u);
  EXPECT_EQ((*r)[0].model, "P100");  // \r stripped.
  EXPECT_EQ((*r)[1].gpus, 8u);
  EXPECT_EQ((*r)[1].line, 3);
  EXPECT_EQ((*r)[2].line, 5);
}

struct BadRow {
  friend void PrintTo(const BadRow& r, std::ostream* os) { *os << r.expected; }
  std::string text;
  std::string expected;  // Substring of the error.
};

class BadNodeRows : public testing::TestWithParam<BadRow> {};

TEST_P(BadNodeRows, NameFileLineAndColumn) {
  Result<std::vector<TraceNode>> r = ParseTraceNodes(GetParam().text, "nodes.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(GetParam().expected), std::string::npos)
      << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Trace, BadNodeRows,
    testing::Values(
        BadRow{"", "nodes.csv: empty file"},
        BadRow{"sn,cpu,memory_mib,gpu,model\n", "nodes.csv:1: the header has no 'cpu_milli' column"},
        BadRow{"sn,cpu_milli,memory_mib,gpu,model,gpu\n",
               "nodes.csv:1: column 6: header 'gpu' is given twice"},
        BadRow{std::string(kNodeHeader), "no node rows"},
        BadRow{std::string(kNodeHeader) + "n,64000,1024,2\n", "nodes.csv:2: expected 5 columns"},
        BadRow{std::string(kNodeHeader) + "n,64k,1024,2,T4\n",
               "nodes.csv:2: column 2 (cpu_milli): '64k' is not a non-negative integer"},
        BadRow{std::string(kNodeHeader) + "n,64000,-1,2,T4\n", "column 3 (memory_mib)"},
        BadRow{std::string(kNodeHeader) + "n,64000,1024,2,\n",
               "column 5 (model): a GPU node needs a model"},
        BadRow{std::string(kNodeHeader) + "n,64000,1024,17,T4\n", "column 4 (gpu)"},
        BadRow{std::string(kNodeHeader) + "n,1,1,1,T4\nn,1,1,1,T4\n",
               "nodes.csv:3: column 1 (sn): duplicate node name 'n'"}));

TEST(ParseTraceTasks, ParsesTheThreeKindsOfTask) {
  Result<std::vector<TraceTask>> r = ParseTraceTasks(
      Tasks("p0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
            "p1,6000,12288,1,460,V100M16|V100M32,LS,Running,1,2,3\n"
            "p2,88000,327680,8,1000,,BE,Failed,,,\n"
            "p3,32000,65536,0,0,,BE,Pending,,,\n"),
      "pods.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].gpu_milli, 460u);
  EXPECT_EQ((*r)[1].gpu_spec, "V100M16|V100M32");
  EXPECT_EQ((*r)[2].num_gpu, 8u);
  EXPECT_EQ((*r)[3].num_gpu, 0u);
  // Creation and deletion times, for the queue replay; empty: unknown.
  EXPECT_EQ((*r)[0].creation_s, 0);
  EXPECT_EQ((*r)[0].deletion_s, 12537496);
  EXPECT_EQ((*r)[1].deletion_s, 2);
  EXPECT_EQ((*r)[2].creation_s, -1);
}

class BadTaskRows : public testing::TestWithParam<BadRow> {};

TEST_P(BadTaskRows, NameFileLineAndColumn) {
  Result<std::vector<TraceTask>> r = ParseTraceTasks(GetParam().text, "pods.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(GetParam().expected), std::string::npos)
      << r.status().message();
}

INSTANTIATE_TEST_SUITE_P(
    Trace, BadTaskRows,
    testing::Values(
        BadRow{Tasks("p,1,1,1,1000,,LS,Running,0,0\n"), "pods.csv:2: expected 11 columns, found 10"},
        BadRow{Tasks("p,1,1,x,1000,,LS,Running,0,0,0\n"),
               "pods.csv:2: column 4 (num_gpu): 'x' is not a non-negative integer"},
        BadRow{Tasks("p,1,1,1,0,,LS,Running,0,0,0\n"),
               "column 5 (gpu_milli): must be 1..1000 for a 1-GPU task, found 0"},
        BadRow{Tasks("p,1,1,1,1001,,LS,Running,0,0,0\n"), "column 5 (gpu_milli)"},
        BadRow{Tasks("p,1,1,2,500,,LS,Running,0,0,0\n"),
               "must be 1000 for a multi-GPU task, found 500"},
        BadRow{Tasks("p,1,1,0,300,,LS,Running,0,0,0\n"), "must be 0 for a task without GPUs"},
        BadRow{Tasks("p,1,1,1,300,T4||P100,LS,Running,0,0,0\n"),
               "column 6 (gpu_spec): empty GPU model name"},
        BadRow{Tasks("p,1,1,0,0,T4,LS,Running,0,0,0\n"), "column 6 (gpu_spec)"},
        BadRow{Tasks("p,1,1,1,300,,LS,Running,9,8,0\n"),
               "column 10 (deletion_time): 8 is before the creation time 9"},
        BadRow{Tasks("p,1,1,1,300,,LS,Running,0,0,0\np,1,1,1,300,,LS,Running,0,0,0\n"),
               "pods.csv:3: column 1 (name): duplicate task name 'p'"},
        BadRow{"name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n",
               "pods.csv:1: the header has no 'gpu_milli' column (needed: "
               "name,cpu_milli,memory_mib,num_gpu,gpu_milli; found: "
               "name,cpu_milli,memory_mib,num_gpu)"},
        BadRow{"name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "pods.csv: no task rows"},
        BadRow{"gpu_milli,name,num_gpu,memory_mib,cpu_milli\n1001,p,1,1,1\n",
               "pods.csv:2: column 1 (gpu_milli): must be 1..1000"}));

// Files of the same release with fewer columns are read, not refused.
TEST(ParseTraceTasks, ReadsColumnsByHeaderNameAndNeedsOnlyTheFirstFive) {
  Result<std::vector<TraceTask>> r = ParseTraceTasks(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
      "p0,12000,16384,1,500\n"
      "p1,88000,327680,8,1000\n",
      "pods.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].gpu_milli, 500u);
  EXPECT_EQ((*r)[0].gpu_spec, "") << "no gpu_spec column: any model";
  EXPECT_EQ((*r)[1].num_gpu, 8u);
  // Any order; gpu_spec taken when present; unknown columns ignored.
  r = ParseTraceTasks(
      "qos,gpu_spec,gpu_milli,num_gpu,memory_mib,cpu_milli,name\n"
      "LS,V100M16,460,1,12288,6000,p1\n",
      "pods.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "p1");
  EXPECT_EQ((*r)[0].cpu_milli, 6000u);
  EXPECT_EQ((*r)[0].memory_mib, 12288u);
  EXPECT_EQ((*r)[0].gpu_milli, 460u);
  EXPECT_EQ((*r)[0].gpu_spec, "V100M16");
}

TEST(ParseTraceNodes, ReadsColumnsByHeaderName) {
  Result<std::vector<TraceNode>> r =
      ParseTraceNodes("model,gpu,sn,memory_mib,cpu_milli,zone\nT4,2,n0,1024,64000,a\n", "n.csv");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].name, "n0");
  EXPECT_EQ((*r)[0].model, "T4");
  EXPECT_EQ((*r)[0].gpus, 2u);
  EXPECT_EQ((*r)[0].cpu_milli, 64000u);
}

}  // namespace
}  // namespace gpuslice::core
