// Asserts that a call raises visattn::Error with a code and a message naming the argument.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "visattn/error.h"

namespace visattn {

template <typename F>
void expect_error(F&& f, ErrorCode code, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "no error raised";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const char* fragment : fragments) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << "message '" << e.what() << "' lacks '" << fragment << "'";
    }
  }
}

}  // namespace visattn
