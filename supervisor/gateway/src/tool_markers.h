/* tool_markers.h — the text of the tool-call syntaxes the chat templates write: what
 * tool_calls.c reads and tool_constraint.c forces. */
#ifndef DSV_GATEWAY_TOOL_MARKERS_H
#define DSV_GATEWAY_TOOL_MARKERS_H

/* DeepSeek-V3/R1: <calls begin><call begin>function<sep>NAME\n```json\nARGS\n```<call end>
 * (\n<call begin>…<call end>)*<calls end>; the markers are single tokens. */
#define DSV_GW_DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DSV_GW_DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DSV_GW_DS_SEP "<｜tool▁sep｜>"
#define DSV_GW_DS_FENCE "```json\n"
#define DSV_GW_DS_CALL_END "<｜tool▁call▁end｜>"
#define DSV_GW_DS_CALLS_END "<｜tool▁calls▁end｜>"
/* Hermes (Qwen2.5): <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>, calls
 * joined by \n; the markers are single tokens. */
#define DSV_GW_HERMES_BEGIN "<tool_call>"
#define DSV_GW_HERMES_END "</tool_call>"
/* Llama 3.1: {"name": "NAME", "parameters": ARGS}, calls joined by "; ", optionally
 * after the python tag. */
#define DSV_GW_LLAMA_TAG "<|python_tag|>"

#endif
