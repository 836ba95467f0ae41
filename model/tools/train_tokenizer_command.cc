#include "model/tools/train_tokenizer_command.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/tokenizer/tokenizer.h"

extern char** environ;

namespace dserve {
namespace {

namespace fs = std::filesystem;

constexpr char kCmd[] = "dserve train-tokenizer";
constexpr char kTmpDirName[] = ".spm_train.tmp";
constexpr size_t kTailBytes = 32 * 1024;

// `name` if it contains a slash, else the first executable `name` on $PATH.
// Empty when there is none.
std::string FindProgram(const std::string& name) {
  auto executable = [](const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  if (path == nullptr || *path == '\0') path = "/usr/local/bin:/usr/bin:/bin";
  for (const std::string& dir : std::vector<std::string>(absl::StrSplit(path, ':'))) {
    const std::string candidate = absl::StrCat(dir.empty() ? std::string(".") : dir, "/", name);
    if (executable(candidate)) return candidate;
  }
  return "";
}

struct ChildResult {
  std::string spawn_error;  // non-empty: the program did not start
  int exit_code = -1;       // when it exited
  int signal = 0;           // when a signal ended it
  std::string tail;         // the end of its stdout+stderr
};

// Runs args[0] with args (no shell), stdin from /dev/null, stdout and stderr
// into one pipe. With `stream`, what it prints is copied to `err` as it
// comes; the last kTailBytes are kept either way.
ChildResult RunChild(const std::vector<std::string>& args, bool stream, std::ostream& err) {
  ChildResult r;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    r.spawn_error = absl::StrCat("pipe: ", std::strerror(errno));
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    r.spawn_error = std::strerror(rc);
    return r;
  }
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (stream) {
      err.write(buf, n);
      err.flush();
    }
    r.tail.append(buf, static_cast<size_t>(n));
    if (r.tail.size() > 2 * kTailBytes) r.tail.erase(0, r.tail.size() - kTailBytes);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      r.spawn_error = absl::StrCat("waitpid: ", std::strerror(errno));
      return r;
    }
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// The last `n` non-empty lines of `text`, each indented.
std::string LastLines(const std::string& text, int n) {
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  const size_t from = lines.size() > static_cast<size_t>(n) ? lines.size() - n : 0;
  std::string out;
  for (size_t i = from; i < lines.size(); ++i) absl::StrAppend(&out, "  | ", lines[i], "\n");
  return out;
}

// spm_train ends a failure with "spm_train_main.cc(275) [_status.ok()]
// Internal: ./src/x.cc(660) [cond] Message." (or a CHECK line); returns the
// message part of the last such line, or "" when there is none.
std::string SpmTrainReason(const std::string& text) {
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (it->find("[_status.ok()]") == std::string::npos && it->find("Check failed") == std::string::npos) {
      continue;
    }
    if (it->find("[!sentences_.empty()]") != std::string::npos) {
      return "the inputs hold no usable lines (empty, or all longer than 4192 bytes)";
    }
    std::string reason = *it;
    // Drop the "file(line) [condition] " prefixes; keep the message.
    for (size_t pos; (pos = reason.find("] ")) != std::string::npos;) reason.erase(0, pos + 2);
    return reason.empty() ? *it : reason;
  }
  return "";
}

bool FsyncPath(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// Checks the trained model with dserve's own tokenizer. Empty on success.
std::string CheckModel(const std::string& path, int vocab_size, int* mask_id) {
  auto tok = Tokenizer::FromSpmFile(path);
  if (!tok.ok()) return absl::StrCat("cannot load it: ", tok.status().ToString());
  const Tokenizer& t = **tok;
  const std::pair<const char*, int> want[] = {{"[PAD]", 0}, {"[CLS]", 1}, {"[SEP]", 2}, {"[UNK]", 3}};
  for (const auto& [piece, id] : want) {
    if (t.PieceToId(piece) != id) {
      return absl::StrCat(piece, " has id ", t.PieceToId(piece), ", expected ", id);
    }
  }
  if (t.pad_id() != 0 || t.cls_id() != 1 || t.sep_id() != 2 || t.unk_id() != 3) {
    return absl::StrFormat("special ids are pad=%d cls=%d sep=%d unk=%d, expected 0 1 2 3",
                           t.pad_id(), t.cls_id(), t.sep_id(), t.unk_id());
  }
  if (t.mask_id() == t.unk_id() || t.IdToPiece(t.mask_id()) != "[MASK]") {
    return absl::StrCat("[MASK] resolves to id ", t.mask_id());
  }
  if (t.vocab_size() != vocab_size) {
    return absl::StrCat("it has ", t.vocab_size(), " ids, expected ", vocab_size);
  }
  *mask_id = t.mask_id();
  return "";
}

}  // namespace

std::vector<std::string> SpmTrainArgs(const TrainTokenizerOptions& o, const std::string& program,
                                      const std::string& model_prefix) {
  std::vector<std::string> a = {
      program,
      absl::StrCat("--input=", absl::StrJoin(o.inputs, ",")),
      absl::StrCat("--model_prefix=", model_prefix),
      absl::StrCat("--model_type=", o.model_type),
      absl::StrCat("--vocab_size=", o.vocab_size),
      absl::StrFormat("--character_coverage=%.10g", o.character_coverage),
      "--pad_id=0",
      "--bos_id=1",
      "--eos_id=2",
      "--unk_id=3",
      "--pad_piece=[PAD]",
      "--bos_piece=[CLS]",
      "--eos_piece=[SEP]",
      "--unk_piece=[UNK]",
      "--control_symbols=[MASK]",
      "--normalization_rule_name=nmt_nfkc",
      "--split_by_whitespace=true",
      absl::StrCat("--byte_fallback=", o.byte_fallback ? "true" : "false"),
      absl::StrCat("--num_threads=", o.threads),
      absl::StrCat("--random_seed=", o.seed),
  };
  if (o.max_sentences > 0) {
    a.push_back(absl::StrCat("--input_sentence_size=", o.max_sentences));
    a.push_back("--shuffle_input_sentence=true");
  }
  return a;
}

int RunTrainTokenizerCommand(const TrainTokenizerOptions& o, std::ostream& out, std::ostream& err) {
  const auto started = std::chrono::steady_clock::now();
  // ---- options and inputs (exit 2)
  if (o.inputs.empty()) {
    err << kCmd << ": no --input files\n";
    return 2;
  }
  if (o.out_dir.empty()) {
    err << kCmd << ": --out DIR is required\n";
    return 2;
  }
  if (o.model_type != "unigram") {
    err << kCmd << ": --model-type " << o.model_type
        << " is not supported: dserve's tokenizer reads Unigram models only\n";
    return 2;
  }
  // spm_train needs more ids than its 4 specials + [MASK] + the characters.
  if (o.vocab_size < 16) {
    err << kCmd << ": --vocab-size " << o.vocab_size << " is too small (at least 16)\n";
    return 2;
  }
  if (!(o.character_coverage > 0.0 && o.character_coverage <= 1.0)) {
    err << kCmd << ": --character-coverage must be in (0, 1], got " << o.character_coverage << "\n";
    return 2;
  }
  if (o.threads < 1) {
    err << kCmd << ": --threads must be at least 1\n";
    return 2;
  }
  uintmax_t input_bytes = 0;
  for (const std::string& in : o.inputs) {
    std::error_code ec;
    if (in.find(',') != std::string::npos) {
      err << kCmd << ": input file '" << in
          << "' has a comma in its name, which spm_train cannot take (it splits --input on commas)\n";
      return 2;
    }
    const fs::file_status st = fs::status(in, ec);
    if (ec || !fs::exists(st)) {
      err << kCmd << ": input file '" << in << "' does not exist\n";
      return 2;
    }
    if (!fs::is_regular_file(st)) {
      err << kCmd << ": input '" << in << "' is not a regular file\n";
      return 2;
    }
    if (::access(in.c_str(), R_OK) != 0) {
      err << kCmd << ": input file '" << in << "' is not readable: " << std::strerror(errno) << "\n";
      return 2;
    }
    input_bytes += fs::file_size(in, ec);
  }
  if (input_bytes == 0) {
    err << kCmd << ": the input files are empty\n";
    return 2;
  }

  // ---- spm_train (exit 1 from here on)
  std::string wanted = o.spm_train;
  if (wanted.empty()) {
    const char* env = std::getenv("DSERVE_SPM_TRAIN");
    wanted = (env != nullptr && *env != '\0') ? env : "spm_train";
  }
  const std::string program = FindProgram(wanted);
  if (program.empty()) {
    err << kCmd << ": cannot find the program '" << wanted
        << "'; install Debian's sentencepiece package (apt-get install sentencepiece), "
           "or name it with --spm-train PATH or $DSERVE_SPM_TRAIN\n";
    return 1;
  }

  std::error_code ec;
  const fs::path out_dir(o.out_dir);
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir)) {
    err << kCmd << ": cannot create output directory '" << o.out_dir << "': " << ec.message() << "\n";
    return 1;
  }
  const fs::path tmp = out_dir / kTmpDirName;
  fs::remove_all(tmp, ec);
  if (!fs::create_directory(tmp, ec)) {
    err << kCmd << ": cannot create '" << tmp.string() << "': " << ec.message() << "\n";
    return 1;
  }
  auto cleanup = [&tmp] {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
  };
  const std::string prefix = (tmp / "spm").string();
  const std::vector<std::string> args = SpmTrainArgs(o, program, prefix);
  if (o.verbose) err << kCmd << ": running " << absl::StrJoin(args, " ") << "\n";

  const ChildResult child = RunChild(args, o.verbose, err);
  if (!child.spawn_error.empty()) {
    err << kCmd << ": cannot run " << program << ": " << child.spawn_error << "\n";
    cleanup();
    return 1;
  }
  if (child.exit_code != 0) {
    err << kCmd << ": " << program << " failed ("
        << (child.signal != 0 ? absl::StrCat("killed by signal ", child.signal)
                              : absl::StrCat("exit code ", child.exit_code))
        << ")";
    const std::string reason = SpmTrainReason(child.tail);
    if (!reason.empty()) {
      err << ": " << reason << "\n";
    } else if (!o.verbose) {
      err << "; its last lines:\n" << LastLines(child.tail, 6);
    } else {
      err << "\n";
    }
    if (!o.verbose) err << "  (--verbose shows spm_train's whole log)\n";
    cleanup();
    return 1;
  }
  const fs::path model = prefix + ".model";
  const fs::path vocab = prefix + ".vocab";
  if (!fs::exists(model, ec)) {
    err << kCmd << ": " << program << " exited 0 but wrote no " << model.string() << "\n";
    cleanup();
    return 1;
  }
  int mask_id = -1;
  const std::string problem = CheckModel(model.string(), o.vocab_size, &mask_id);
  if (!problem.empty()) {
    err << kCmd << ": the trained model " << model.string() << " is not usable: " << problem << "\n";
    cleanup();
    return 1;
  }

  // ---- into place: fsync, rename (atomic per file), fsync the directory.
  const fs::path final_model = out_dir / "spm.model";
  const fs::path final_vocab = out_dir / "spm.vocab";
  if (!FsyncPath(model, false)) {
    err << kCmd << ": fsync " << model.string() << ": " << std::strerror(errno) << "\n";
    cleanup();
    return 1;
  }
  if (fs::exists(vocab, ec)) {
    FsyncPath(vocab, false);
    fs::rename(vocab, final_vocab, ec);
    if (ec) err << kCmd << ": warning: could not write " << final_vocab.string() << ": " << ec.message() << "\n";
  }
  fs::rename(model, final_model, ec);
  if (ec) {
    err << kCmd << ": cannot move the model to " << final_model.string() << ": " << ec.message() << "\n";
    cleanup();
    return 1;
  }
  FsyncPath(out_dir, true);
  cleanup();

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  out << absl::StrFormat(
      "wrote %s: %s, %d ids ([PAD]=0 [CLS]=1 [SEP]=2 [UNK]=3 [MASK]=%d), nmt_nfkc, "
      "character_coverage %g%s, from %d file%s (%.1f MB) in %.1f s\n",
      final_model.string(), o.model_type, o.vocab_size, mask_id, o.character_coverage,
      o.byte_fallback ? ", byte_fallback" : "", static_cast<int>(o.inputs.size()),
      o.inputs.size() == 1 ? "" : "s", static_cast<double>(input_bytes) / 1e6, seconds);
  return 0;
}

}  // namespace dserve
