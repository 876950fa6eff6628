/* tool_constraint.h — the JSON Schema that tool_choice "required" or a named function
 * constrains the output to (tool_constraint.c). */
#ifndef DSV_GATEWAY_TOOL_CONSTRAINT_H
#define DSV_GATEWAY_TOOL_CONSTRAINT_H

#include <stdbool.h>

struct cJSON;

/* The schema, as compact JSON text (free with cJSON_free), of a call of one of tools
 * (checked by messages.c), or only of the one named only when it is not NULL:
 * {"name": <one of the names>, "arguments": <valid against that function's parameters>};
 * with parallel, a JSON array of one or more such calls. NULL when out of memory. */
char *dsv__gw_tool_constraint_schema(const struct cJSON *tools, const char *only, bool parallel);

#endif
