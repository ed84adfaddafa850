// ChatTemplate: the families' own templates (tests/data/chat_templates) on small conversations
// whose expected prompts are written out by hand from each model's documented format.
#include "ridge/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ridge/tokenizer/jinja/error.h"

namespace ridge::tokenizer {
namespace {

std::string load_template(const std::string& family) {
  const std::string path =
      std::string(RIDGE_SOURCE_DIR) + "/tests/data/chat_templates/" + family + ".jinja";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::vector<ChatMessage> kSystemUserAssistantUser = {
    {"system", "S"}, {"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}};

TEST(ChatTemplate, SmolLM2AddsItsDefaultSystemPrompt) {
  const ChatTemplate t(load_template("smollm2"));
  EXPECT_EQ(t.render({{"user", "Hi"}}, true, "<|im_start|>", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "Hi"}}, false, "<|im_start|>", "<|im_end|>"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, Llama2FoldsTheSystemPromptIntoTheFirstTurn) {
  const ChatTemplate t(load_template("llama2"));
  EXPECT_EQ(t.render(kSystemUserAssistantUser, true, "<s>", "</s>"),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]");
}

TEST(ChatTemplate, Llama2RejectsNonAlternatingRoles) {
  const ChatTemplate t(load_template("llama2"));
  try {
    t.render({{"user", "a"}, {"user", "b"}}, false, "<s>", "</s>");
    FAIL() << "expected an error";
  } catch (const jinja::TemplateError& e) {
    EXPECT_EQ(e.kind(), jinja::TemplateError::Kind::raised);
    EXPECT_STREQ(e.what(), "Conversation roles must alternate user/assistant/user/assistant/...");
  }
}

TEST(ChatTemplate, Llama3) {
  const ChatTemplate t(load_template("llama3"));
  EXPECT_EQ(t.render({{"system", " S "}, {"user", "U"}}, true, "<|begin_of_text|>", "<|eot_id|>"),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, Llama31WithTheDateFromExtraVariables) {
  const ChatTemplate t(load_template("llama3_1"));
  const std::string expected_default =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nS<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>";
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "U"}}, false, "<|begin_of_text|>", "<|eot_id|>"),
            expected_default);
  const std::string with_date = t.render({{"user", "U"}}, true, "<|begin_of_text|>", "<|eot_id|>",
                                         nlohmann::json{{"date_string", "01 Jan 2025"}});
  EXPECT_NE(with_date.find("Today Date: 01 Jan 2025\n\n<|eot_id|>"), std::string::npos)
      << with_date;
}

TEST(ChatTemplate, MistralV01) {
  const ChatTemplate t(load_template("mistral_v01"));
  EXPECT_EQ(t.render({{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}, false, "<s>", "</s>"),
            "<s>[INST] U1 [/INST]A1</s>[INST] U2 [/INST]");
  EXPECT_THROW(t.render(kSystemUserAssistantUser, false, "<s>", "</s>"), jinja::TemplateError);
}

TEST(ChatTemplate, MistralV03PutsTheSystemPromptInTheLastUserTurn) {
  const ChatTemplate t(load_template("mistral_v03"));
  EXPECT_EQ(t.render(kSystemUserAssistantUser, false, "<s>", "</s>"),
            "<s>[INST] U1[/INST] A1</s>[INST] S\n\nU2[/INST]");
}

TEST(ChatTemplate, Qwen2) {
  const ChatTemplate t(load_template("qwen2"));
  EXPECT_EQ(t.render({{"user", "U"}}, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen25ToolCallsThroughRenderVariables) {
  const ChatTemplate t(load_template("qwen2_5"));
  const auto vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Z\u00fcrich"}}}]},
      {"role": "tool", "content": "21C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
    "add_generation_prompt": true})");
  EXPECT_EQ(
      t.render_variables(vars),
      "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
      "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {}}}\n"
      "</tools>\n\nFor each function call, return a json object with function name and arguments "
      "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Z\xC3\xBCrich\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n21C\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ToolsAndDocumentsAreNoneByDefault) {
  const ChatTemplate t("{{ tools is none }} {{ documents is none }} {{ tools is defined }}");
  EXPECT_EQ(t.render({}, false, "", ""), "True True True");
}

TEST(ChatTemplate, DefaultTemplateIsChatML) {
  const ChatTemplate t(default_chat_template());
  EXPECT_EQ(t.render({{"user", "Hi"}}, true, "", ""),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplate, SyntaxErrorsThrowRidgeErrorFromTheConstructor) {
  EXPECT_THROW(ChatTemplate("{% for m in messages %}"), ridge::Error);
}

TEST(ChatTemplate, RendersConcurrentlyFromManyThreads) {
  // The server renders one parsed template from every request thread.
  const ChatTemplate t(load_template("llama3_1"));
  std::vector<ChatMessage> messages = {{"system", "S"}};
  for (int i = 0; i < 50; ++i) {
    messages.push_back({i % 2 ? "assistant" : "user", "message " + std::to_string(i)});
  }
  const std::string expected = t.render(messages, true, "<|begin_of_text|>", "<|eot_id|>");
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < 50; ++r) {
        if (t.render(messages, true, "<|begin_of_text|>", "<|eot_id|>") != expected)
          ++mismatches[k];
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(ChatTemplate, IsMovable) {
  ChatTemplate a("{{ bos_token }}");
  ChatTemplate b = std::move(a);
  EXPECT_EQ(b.render({}, false, "<s>", ""), "<s>");
}

}  // namespace
}  // namespace ridge::tokenizer
