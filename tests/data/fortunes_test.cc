// The fortune-file reader on small temporary folders, and on Debian's corpus.
#include "data/fortunes.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "data/char_corpus.h"
#include "tests/data/test_files.h"
#include "tests/test_util.h"

namespace loom::data {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST(Fortunes, SplitOnPercentLines) {
  EXPECT_EQ(split_fortunes("a\n%\nb b\nc\n%\n"), (std::vector<std::string>{"a\n", "b b\nc\n"}));
  // "%" inside a line is text; empty fortunes vanish; the last needs no "%".
  EXPECT_EQ(split_fortunes("%\n50% off\n%\n%\n  \n%\nlast"),
            (std::vector<std::string>{"50% off\n", "last"}));
  EXPECT_EQ(split_fortunes(""), std::vector<std::string>{});
  EXPECT_EQ(split_fortunes("% \nx\n"), (std::vector<std::string>{"% \nx\n"}));  // not a separator
}

TEST(Fortunes, ReadsAFolderInNameOrderSkippingIndexesAndLinks) {
  namespace fs = std::filesystem;
  const std::string dir = testing::temp_path("fortunes");
  fs::create_directories(dir);
  write_text(dir + "/zen", "Z1\n%\nZ2\n%\n");
  write_text(dir + "/art", "A1\nA1b\n%\nA2");
  write_text(dir + "/art.dat", "\x02\x00binary index");  // strfile's index: skipped
  fs::create_symlink("art", dir + "/art.u8");            // a link to the same text: skipped
  fs::create_directories(dir + "/off");                  // folders: skipped
  write_text(dir + "/off/rude", "R\n%\n");
  EXPECT_EQ(read_fortunes(dir), "A1\nA1b\n\nA2\n\nZ1\n\nZ2\n\n");

  CharCorpus corpus = CharCorpus::fortunes(dir, 0.5);
  EXPECT_EQ(corpus.vocab.chars(), "\n12AZb");
  EXPECT_EQ(corpus.train.numel() + corpus.validation.numel(), 20);
}

TEST(Fortunes, MissingOrEmptyFolder) {
  const std::string missing = testing::temp_path("no-such-folder");
  EXPECT_THROW_MSG(read_fortunes(missing), "read_fortunes: " + missing +
                                               " not found; install the Debian "
                                               "package fortunes");
  const std::string empty = testing::temp_path("empty");
  std::filesystem::create_directories(empty);
  write_text(empty + "/only.dat", "index");
  EXPECT_THROW_MSG(read_fortunes(empty),
                   "read_fortunes: no fortunes in " + empty + " (0 fortune files)");
}

// A folder whose files hold more text than a model could take (here one
// sparse file of 1 TiB) is refused by its sizes, before a byte is read: the
// error names the file, not the batch size.
TEST(Fortunes, RefusesMoreTextThanTheLimitBeforeReadingIt) {
  namespace fs = std::filesystem;
  const std::string dir = testing::temp_path("huge_fortunes");
  fs::create_directories(dir);
  write_text(dir + "/small", "a\n%\n");
  write_text(dir + "/zz-huge", "");
  fs::resize_file(dir + "/zz-huge", uint64_t{1} << 40);  // sparse: no disk used
  EXPECT_THROW_MSG(read_fortunes(dir), "read_fortunes: " + dir + " holds 1099511627780 bytes of text (the largest file, " +
                                           dir + "/zz-huge, has 1099511627776), more than the 268435456 a character "
                                           "model's text may have");
}

TEST(Fortunes, DebianCorpus) {
  const std::string text = read_fortunes();  // tools/setup.sh installs the package
  EXPECT_GT(text.size(), 1'000'000u);
  EXPECT_EQ(text.find("\n%\n"), std::string::npos);  // no separator lines left
  EXPECT_EQ(text.rfind("%\n", 0), std::string::npos);
  CharCorpus corpus = CharCorpus::from_text(text);
  for (char c : std::string("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ .,!?'\n"))
    EXPECT_TRUE(corpus.vocab.contains(c)) << "'" << c << "'";
  EXPECT_LT(corpus.vocab.size(), 256);
  EXPECT_EQ(corpus.validation.numel(), static_cast<int64_t>(text.size() / 10));
  EXPECT_EQ(corpus.vocab.decode(corpus.validation.narrow(0, 0, 100)),
            text.substr(text.size() - text.size() / 10, 100));
}

}  // namespace
}  // namespace loom::data
