#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

namespace kvserve {
namespace {

struct OwnedTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

std::vector<OwnedTensor> RandomTensors(std::mt19937_64& rng) {
  const SafetensorsDType dtypes[] = {SafetensorsDType::kF32, SafetensorsDType::kF16,
                                     SafetensorsDType::kBF16, SafetensorsDType::kI64,
                                     SafetensorsDType::kU8};
  std::vector<OwnedTensor> out;
  const int n = 1 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    OwnedTensor t;
    t.name = "layer." + std::to_string(i) + ".w" + std::to_string(rng() % 1000);
    t.dtype = dtypes[rng() % 5];
    const int rank = static_cast<int>(rng() % 4);
    int64_t elements = 1;
    for (int r = 0; r < rank; ++r) {
      t.shape.push_back(static_cast<int64_t>(rng() % 7));
      elements *= t.shape.back();
    }
    t.bytes.resize(elements * SafetensorsDTypeSize(t.dtype));
    for (auto& b : t.bytes) b = static_cast<std::byte>(rng());
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<TensorToWrite> AsWrite(const std::vector<OwnedTensor>& tensors) {
  std::vector<TensorToWrite> w;
  for (const auto& t : tensors) w.push_back({t.name, t.dtype, t.shape, t.bytes});
  return w;
}

// Builds a file image from a raw header string and a data buffer.
std::vector<std::byte> Image(const std::string& header, size_t data_bytes) {
  std::vector<std::byte> out(8 + header.size() + data_bytes, std::byte{0x5a});
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

Status ParseImage(const std::vector<std::byte>& image) {
  return SafetensorsFile::FromBuffer(image, "mem").status();
}

TEST(SafetensorsTest, RoundTripRandomTensorsAndMetadata) {
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    auto tensors = RandomTensors(rng);
    std::map<std::string, std::string> meta;
    if (trial % 2) meta["format"] = "pt", meta["trial"] = std::to_string(trial);
    auto image = SerializeSafetensors(AsWrite(tensors), meta);
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    auto file = SafetensorsFile::FromBuffer(*image, "mem");
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ((*file)->metadata(), meta);
    EXPECT_EQ((*file)->Names().size(), tensors.size());
    for (const auto& t : tensors) {
      auto slice = (*file)->Find(t.name);
      ASSERT_TRUE(slice.ok());
      EXPECT_EQ(slice->dtype, t.dtype);
      EXPECT_EQ(slice->shape, t.shape);
      ASSERT_EQ(slice->data.size(), t.bytes.size());
      if (!t.bytes.empty())  // memcmp's pointers must be valid even for size 0
        EXPECT_EQ(0, std::memcmp(slice->data.data(), t.bytes.data(), t.bytes.size()));
    }
    EXPECT_EQ((*file)->Find("missing").status().code(), StatusCode::kNotFound);
  }
}

TEST(SafetensorsTest, WriteThenOpenFromDisk) {
  std::mt19937_64 rng(99);
  auto tensors = RandomTensors(rng);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("st_test_" + std::to_string(rng()))).string();
  ASSERT_TRUE(WriteSafetensors(path, AsWrite(tensors), {{"k", "v"}}).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ((*file)->metadata().at("k"), "v");
  for (const auto& t : tensors) {
    auto slice = (*file)->Find(t.name);
    ASSERT_TRUE(slice.ok());
    EXPECT_EQ(0, std::memcmp(slice->data.data(), t.bytes.data(), t.bytes.size()));
  }
  std::filesystem::remove(path);
  EXPECT_EQ(SafetensorsFile::Open(path).status().code(), StatusCode::kNotFound);
}

TEST(SafetensorsTest, WriterRejectsInconsistentInput) {
  std::vector<std::byte> four(4);
  EXPECT_FALSE(SerializeSafetensors({{"a", SafetensorsDType::kF32, {2}, four}}).ok());
  EXPECT_FALSE(SerializeSafetensors({{"a", SafetensorsDType::kF32, {1}, four},
                                     {"a", SafetensorsDType::kF32, {1}, four}})
                   .ok());
  EXPECT_FALSE(SerializeSafetensors({{"__metadata__", SafetensorsDType::kF32, {1}, four}}).ok());
}

// Every truncation of a valid file is rejected with Corruption, never a crash.
TEST(SafetensorsTest, EveryTruncationIsCorruption) {
  std::mt19937_64 rng(7);
  std::vector<OwnedTensor> tensors;
  do tensors = RandomTensors(rng);
  while (tensors.empty() || tensors[0].bytes.empty());
  auto image = SerializeSafetensors(AsWrite(tensors));
  ASSERT_TRUE(image.ok());
  for (size_t len = 0; len < image->size(); ++len) {
    std::vector<std::byte> cut(image->begin(), image->begin() + len);
    Status s = ParseImage(cut);
    EXPECT_EQ(s.code(), StatusCode::kCorruption) << "len " << len << ": " << s.ToString();
  }
}

// Random byte flips never crash; they either parse or give Corruption.
TEST(SafetensorsTest, RandomCorruptionNeverCrashes) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    auto tensors = RandomTensors(rng);
    auto image = SerializeSafetensors(AsWrite(tensors));
    ASSERT_TRUE(image.ok());
    auto bytes = *image;
    const size_t header_end = 8 + (static_cast<size_t>(bytes[0]) | (size_t(bytes[1]) << 8));
    for (int f = 0; f < 3; ++f) {
      // Aim most flips at the length and header, where parsing happens.
      const size_t pos = rng() % std::min(bytes.size(), header_end + 1);
      bytes[pos] = static_cast<std::byte>(rng());
    }
    Status s = ParseImage(bytes);
    if (!s.ok()) {
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
    }
  }
}

TEST(SafetensorsTest, HeaderLiesAreCaught) {
  struct Case {
    std::string header;
    size_t data;
    std::string expect;  // substring of the message
  };
  const Case cases[] = {
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, ""},  // valid
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8, "past the"},
      {R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, "does not match"},
      {R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8, "unknown dtype"},
      {R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "shape"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "begin"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12, "overlap"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8, "hole"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8, "trailing"},
      {R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4, "twice"},
      {R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", 8,
       "overflow"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":1}})", 8, "unknown field"},
      {R"({"__metadata__":{"k":1}})", 0, "not a string"},
      {R"([1,2,3])", 0, "not a JSON object"},
      {R"({"w":)", 0, "not valid JSON"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0.5,8]}})", 8, "non-negative"},
  };
  for (const Case& c : cases) {
    Status s = ParseImage(Image(c.header, c.data));
    if (c.expect.empty()) {
      EXPECT_TRUE(s.ok()) << c.header << " -> " << s.ToString();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kCorruption) << c.header;
      EXPECT_NE(s.message().find(c.expect), std::string::npos)
          << c.header << " -> " << s.ToString();
      EXPECT_NE(s.message().find("mem"), std::string::npos) << "message names the source";
    }
  }
}

TEST(SafetensorsTest, HeaderLengthBounds) {
  std::vector<std::byte> image(16, std::byte{0});
  image[7] = std::byte{0x01};  // 2^56 bytes of header
  EXPECT_EQ(ParseImage(image).code(), StatusCode::kCorruption);
  std::vector<std::byte> exact = Image("{}", 0);
  EXPECT_TRUE(ParseImage(exact).ok());
  exact[0] = std::byte{3};  // one past the end
  EXPECT_EQ(ParseImage(exact).code(), StatusCode::kCorruption);
}

TEST(SafetensorsTest, KvDTypeMapping) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) {
    auto back = ToKvDType(FromKvDType(d));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(ToKvDType(SafetensorsDType::kI64).status().code(), StatusCode::kNotSupported);
}

}  // namespace
}  // namespace kvserve
