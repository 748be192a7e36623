// English text for character-level models: the fortune cookies of Debian's
// `fortunes` package (in /usr/share/games/fortunes/).
//
// A fortune file is plain text holding many fortunes, each ended by a line
// that holds only "%". read_fortunes reads every fortune file of a folder in
// name order (skipping strfile's .dat indexes and the .u8 links to the same
// files), and joins their fortunes, each followed by an empty line.
//
//   std::string text = read_fortunes();                   // about 2.5 MB
//   std::vector<std::string> f = split_fortunes("a\n%\nb\n%\n");   // {"a\n", "b\n"}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::data {

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes/";

// The fortunes of one file's text: lines that are exactly "%" separate them;
// fortunes of only white space are left out.
std::vector<std::string> split_fortunes(const std::string& text);

// The most bytes of text read_fortunes reads from a folder: a character
// model holds each character as an 8-byte token, so this is 2 GiB of tokens
// (Debian's fortunes are 2.5 MB, nanoGPT's Shakespeare 1 MB).
inline constexpr uint64_t kMaxFortunesBytes = uint64_t{256} << 20;

// All fortunes of the folder's fortune files, in order, each followed by "\n"
// (so an empty line separates them). Throws, naming the folder and the
// package `fortunes`, when the folder is missing or holds no fortunes, and
// naming the folder, its largest file and the limit, before reading any of
// it, when its files hold more than kMaxFortunesBytes.
std::string read_fortunes(const std::string& dir = kFortunesDir);

}  // namespace loom::data
