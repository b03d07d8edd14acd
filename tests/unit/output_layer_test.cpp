// The one output layer (include/u3d/core/csv.h, json.h, text.h, stats.h): CSV rows quote what needs
// it and read back to the same fields; JSON lines keep the layout the files and stdout lines had;
// shape_text, channel lookup and the percentile convention are the ones every caller shares.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/json.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

TEST(OutputLayer, CsvQuotesNamesWithCommasAndQuotesAndReadsThemBack) {
  EXPECT_EQ(csv_row({"case_1", "0.93"}), "case_1,0.93\n");
  const std::vector<std::string> fields{"a,b", "say \"hi\"", "", "two\nlines"};
  const std::string row = csv_row(fields);
  EXPECT_EQ(row, "\"a,b\",\"say \"\"hi\"\"\",,\"two\nlines\"\n");
  const auto rows = parse_csv("h1,h2,h3,h4\n" + row + "x,y");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].fields, fields);
  EXPECT_TRUE(rows[1].complete);
  EXPECT_EQ(rows[2].line, 4u);  // the quoted line break counts
  EXPECT_FALSE(rows[2].complete);
  EXPECT_EQ(parse_csv("a,b\r\n")[0].fields, (std::vector<std::string>{"a", "b"}));
}

TEST(OutputLayer, JsonLinesKeepPythonsLayoutAndOrder) {
  const Json j = {{"patch", {64, 64, 32}}, {"device", "cpu"}, {"none", nullptr}, {"name", "a\"b"}};
  EXPECT_EQ(json_line(j), R"({"patch": [64, 64, 32], "device": "cpu", "none": null, "name": "a\"b"})");
  EXPECT_EQ(json_line(json_number(0.123456, 4)), "0.1235");
  EXPECT_EQ(json_line(json_number(std::nan(""), 4)), "null");
  EXPECT_EQ(json_line(json_count(-1)), "null");
  EXPECT_EQ(json_file_text(Json::array({Json{{"a", 1}}, Json{{"a", 2}}})), "[\n  {\"a\": 1},\n  {\"a\": 2}\n]\n");
  EXPECT_EQ(parse_json(json_line(j), "x.json"), j);
  EXPECT_THROW(parse_json("{", "x.json"), DataError);
}

TEST(OutputLayer, ShapesChannelsAndPercentilesHaveOneConvention) {
  EXPECT_EQ(shape_text(std::vector<int64_t>{1, 16, 8}), "(1, 16, 8)");
  EXPECT_EQ(shape_text(std::array<int64_t, 3>{16, 16, 8}, ShapeStyle::kCross), "16x16x8");
  const std::vector<std::string> names{"ct", "mask"};
  EXPECT_EQ(find_channel(names, "mask"), 1);
  EXPECT_FALSE(find_channel(names, "pet"));
  try {
    channel_index(names, "pet", "data.channels", "in the dataset");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "data.channels: channel 'pet' is not in the dataset; it has: ct, mask");
  }
  // numpy.percentile([1, 2, 3, 4], q): 2.5 at 50, 1.3 at 10, 4 at 100.
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 10), 1.3);
  EXPECT_DOUBLE_EQ(percentile({4, 1, 3, 2}, 100), 4.0);
  EXPECT_TRUE(std::isnan(percentile({}, 50)));
}

}  // namespace
}  // namespace u3d
