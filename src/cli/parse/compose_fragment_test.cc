#include "cli/parse/compose_fragment.h"

#include <gtest/gtest.h>

namespace gpuslice::cli {
namespace {

using nlohmann::json;

// What the daemon answers for a job on one real GPU (api.cc JobContainer),
// with the cgroup the job's processes live in.
json Container() {
  return {{"job", 12},
          {"cdi_device", "gpuslice.dev/slice=12"},
          {"device_nodes", {"/dev/nvidia0", "/dev/nvidiactl"}},
          {"mounts",
           {{{"host_path", "/usr/lib/gpuslice/libgpuslice.so"},
             {"container_path", "/usr/lib/gpuslice/libgpuslice.so"},
             {"read_only", true}},
            {{"host_path", "/run/gpuslice/slices/12"},
             {"container_path", "/run/gpuslice/slices/12"},
             {"read_only", false}}}},
          {"env", {"LD_PRELOAD=/usr/lib/gpuslice/libgpuslice.so", "GPUSLICE_JOB_ID=12"}},
          {"cgroup_parent", "/gpuslice/job-12"}};
}

std::string Error(const core::Result<std::string>& r) {
  return r.ok() ? "(no error: " + *r + ")" : r.status().message();
}

TEST(ComposeFragment, PutsEveryFieldOfTheSliceUnderTheService) {
  auto f = ComposeFragment("inference", Container());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f,
            "# gpuslice job 12's slice (gpuslice container-args --compose inference 12); valid "
            "while the job runs.\n"
            "services:\n"
            "  \"inference\":\n"
            "    devices:\n"
            "      - \"/dev/nvidia0\"\n"
            "      - \"/dev/nvidiactl\"\n"
            "    volumes:\n"
            "      - \"/usr/lib/gpuslice/libgpuslice.so:/usr/lib/gpuslice/libgpuslice.so:ro\"\n"
            "      - \"/run/gpuslice/slices/12:/run/gpuslice/slices/12\"\n"
            "    environment:\n"
            "      \"LD_PRELOAD\": \"/usr/lib/gpuslice/libgpuslice.so\"\n"
            "      \"GPUSLICE_JOB_ID\": \"12\"\n"
            "    cgroup_parent: \"/gpuslice/job-12\"\n");
}

// The simulated GPU has no device nodes; a daemon without cgroups gives no
// cgroup_parent (or an empty one), and an older one none at all.
TEST(ComposeFragment, EmptyListsStayAndNoCgroupParentMeansNoKey) {
  for (int variant : {0, 1, 2}) {  // Absent, null, "".
    json c = Container();
    c["device_nodes"] = json::array();
    c["mounts"] = json::array();
    c["env"] = json::array();
    c.erase("job");
    if (variant == 0) c.erase("cgroup_parent");
    if (variant == 1) c["cgroup_parent"] = nullptr;
    if (variant == 2) c["cgroup_parent"] = "";
    auto f = ComposeFragment("nb", c);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(*f,
              "services:\n"
              "  \"nb\":\n"
              "    devices: []\n"
              "    volumes: []\n"
              "    environment: {}\n");
  }
}

TEST(ComposeFragment, MountsAreReadOnlyUnlessTheDaemonSaysOtherwise) {
  json c = Container();
  c["mounts"] = {{{"host_path", "/a"}, {"container_path", "/b"}}};
  auto f = ComposeFragment("s", c);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_NE(f->find("      - \"/a:/b:ro\"\n"), std::string::npos) << *f;
}

// A value is written so that YAML (and compose's ${VAR} substitution) gives
// back exactly the daemon's text.
TEST(ComposeFragment, ValuesThatYamlOrComposeWouldReadOtherwiseAreQuoted) {
  json c = Container();
  c["env"] = {"A=x: y # not a comment",
              "B=\"quoted\" and 'single'",
              "C=- starts like a list",
              "D=${HOME} and $$",
              "E=",
              "F=true",
              "G=a=b",
              "H=line1\nline2\\n"};
  c["mounts"] = {{{"host_path", "/data/my models #1"},
                  {"container_path", "/models/\"x\""},
                  {"read_only", true}}};
  c["cgroup_parent"] = "/gpuslice/$job";
  auto f = ComposeFragment("s", c);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const char* line : {
           "      \"A\": \"x: y # not a comment\"\n",
           "      \"B\": \"\\\"quoted\\\" and 'single'\"\n",
           "      \"C\": \"- starts like a list\"\n",
           "      \"D\": \"$${HOME} and $$$$\"\n",
           "      \"E\": \"\"\n",
           "      \"F\": \"true\"\n",
           "      \"G\": \"a=b\"\n",
           "      \"H\": \"line1\\nline2\\\\n\"\n",
           "      - \"/data/my models #1:/models/\\\"x\\\":ro\"\n",
           "    cgroup_parent: \"/gpuslice/$$job\"\n",
       }) {
    EXPECT_NE(f->find(line), std::string::npos) << "missing " << line << "in\n" << *f;
  }
}

TEST(YamlQuoted, EscapesWhatIsNotPrintableAscii) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"", "\"\""},
      {"plain", "\"plain\""},
      {"a\"b\\c", "\"a\\\"b\\\\c\""},
      {"#:-[]{}&*!|>'%@`,?", "\"#:-[]{}&*!|>'%@`,?\""},
      {"tab\there\r\n", "\"tab\\there\\r\\n\""},
      {std::string("nul\0bell\a", 9), "\"nul\\x00bell\\x07\""},
      {"del\x7f", "\"del\\x7F\""},
      {"caf\xc3\xa9", "\"caf\\u00E9\""},      // U+00E9
      {"nel\xc2\x85", "\"nel\\u0085\""},      // U+0085: a line break to YAML
      {"ls\xe2\x80\xa8", "\"ls\\u2028\""},    // U+2028: likewise
      {"bom\xef\xbb\xbf", "\"bom\\uFEFF\""},  // U+FEFF
      {"\xf0\x9f\x99\x82", "\"\\U0001F642\""},
  };
  for (const Case& c : cases) {
    auto q = YamlQuoted(c.in);
    ASSERT_TRUE(q.ok()) << c.out << ": " << q.status().ToString();
    EXPECT_EQ(*q, c.out);
  }
}

TEST(YamlQuoted, RefusesTextThatIsNotUtf8) {
  for (const char* bad :
       {"\xff", "\xc3", "a\xe2\x80", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80"}) {
    auto q = YamlQuoted(bad);
    ASSERT_FALSE(q.ok()) << *q;
    EXPECT_NE(q.status().message().find("not valid UTF-8"), std::string::npos);
  }
}

TEST(CheckComposeServiceName, AcceptsWhatComposeAccepts) {
  for (const char* good : {"inference", "web-1", "my_app.v2", "A", "1", "-x", "_"}) {
    EXPECT_TRUE(CheckComposeServiceName(good).ok()) << good;
  }
}

TEST(CheckComposeServiceName, RefusesOtherNamesNamingTheCharacter) {
  struct Case {
    const char* name;
    const char* says;
  } cases[] = {
      {"", "the service name is empty"},
      {"my app", "'my app' is not a compose service name (' ')"},
      {"a:b", "(':')"},
      {"a/b", "('/')"},
      {"caf\xc3\xa9", "(0xC3)"},
      {"x\n", "(0x0A)"},
      {"${X}", "('$')"},
  };
  for (const Case& c : cases) {
    core::Status s = CheckComposeServiceName(c.name);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(s.code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
    EXPECT_EQ(s.message().rfind("--compose: ", 0), 0u) << s.message();
  }
  auto f = ComposeFragment("my app", Container());
  EXPECT_NE(Error(f).find("not a compose service name"), std::string::npos) << Error(f);
}

TEST(ComposeFragment, RefusesWhatComposeCannotCarry) {
  struct Case {
    const char* what;
    json patch;
    const char* says;
  } cases[] = {
      {"':' in a host path",
       {{"mounts", {{{"host_path", "/a:b"}, {"container_path", "/c"}}}}},
       "mount path '/a:b' holds ':'"},
      {"':' in a container path",
       {{"mounts", {{{"host_path", "/a"}, {"container_path", "c:"}}}}},
       "mount path 'c:' holds ':'"},
      {"':' in a device", {{"device_nodes", {"/dev/x:y"}}}, "device node '/dev/x:y' holds ':'"},
      {"empty path",
       {{"mounts", {{{"host_path", ""}, {"container_path", "/c"}}}}},
       "mount path is empty"},
      {"no '='", {{"env", {"NOVALUE"}}}, "environment entry 'NOVALUE' has no '='"},
      {"bad name", {{"env", {"1X=a"}}}, "environment entry '1X=a': the name must be"},
      {"empty name", {{"env", {"=a"}}}, "environment entry '=a': the name must be"},
      {"odd name", {{"env", {"A-B=a"}}}, "environment entry 'A-B=a'"},
      {"twice", {{"env", {"A=1", "A=2"}}}, "environment variable A is given twice"},
      {"not UTF-8", {{"env", {"A=\xff"}}}, "environment variable A: not valid UTF-8 (byte 0)"},
      {"no device list", {{"device_nodes", nullptr}}, "no 'device_nodes' list"},
      {"mounts not a list", {{"mounts", "x"}}, "no 'mounts' list"},
      {"env entry not a string", {{"env", {1}}}, "an environment entry is not a string"},
      {"mount without host",
       {{"mounts", {{{"container_path", "/c"}}}}},
       "a mount lacks host_path or container_path"},
      {"read_only not bool",
       {{"mounts", {{{"host_path", "/a"}, {"container_path", "/c"}, {"read_only", "yes"}}}}},
       "read_only is not true/false"},
      {"cgroup_parent not a string", {{"cgroup_parent", 3}}, "cgroup_parent is not a string"},
  };
  for (const Case& c : cases) {
    json container = Container();
    for (auto& [k, v] : c.patch.items()) {
      if (v.is_null()) {
        container.erase(k);
      } else {
        container[k] = v;
      }
    }
    auto f = ComposeFragment("s", container);
    EXPECT_NE(Error(f).find(c.says), std::string::npos) << c.what << ": " << Error(f);
  }
  EXPECT_NE(Error(ComposeFragment("s", json::array())).find("not a JSON object"),
            std::string::npos);
}

}  // namespace
}  // namespace gpuslice::cli
