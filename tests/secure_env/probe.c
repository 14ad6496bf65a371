/* probe.c - prints guard.level and where it came from (tests/secure_env). */
#include <stdio.h>

#include <sefer.h>

int main(void)
{
    char value[64];
    if (sefer_config_get("guard.level", value, sizeof value) != 0)
        return 2;
    printf("%s %s\n", value, sefer_config_source("guard.level"));
    return 0;
}
