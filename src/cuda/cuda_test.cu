#include <gtest/gtest.h>
TEST(Cuda, Placeholder) {}
