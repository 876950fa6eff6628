/* tool_constraint.h — what tool_choice "required" or a named function constrains the
 * output to (tool_constraint.c): a JSON call, or a call in the template's own syntax. */
#ifndef DSV_GATEWAY_TOOL_CONSTRAINT_H
#define DSV_GATEWAY_TOOL_CONSTRAINT_H

#include <stdbool.h>

#include "dsv_gateway.h"

struct cJSON;

/* The schema, as compact JSON text (free with cJSON_free), of a call of one of tools
 * (checked by messages.c), or only of the one named only when it is not NULL:
 * {"name": <one of the names>, "arguments": <valid against that function's parameters>};
 * with parallel, a JSON array of one or more such calls. NULL when out of memory. */
char *dsv__gw_tool_constraint_schema(const struct cJSON *tools, const char *only, bool parallel);

/* The composed grammar (dse_grammar_compile_composed; compact JSON, free with cJSON_free)
 * of a call of one of tools, or only of the one named only, written in format's syntax
 * (tool_markers.h): the markers as special tokens, the name one of the functions, the
 * arguments valid against its parameters; with parallel one or more calls as the format
 * joins them. NULL for DSV_GATEWAY_TOOLS_NONE or out of memory. */
char *dsv__gw_tool_constraint_composed(const struct cJSON *tools, const char *only, bool parallel,
                                       enum dsv_gateway_tool_format format);

#endif
