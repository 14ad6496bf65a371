/* env_probe.c - prints guard.level, where it came from, and whether the kernel
 * started this program in secure mode (getauxval(AT_SECURE): set for a
 * setuid or setgid program whose ids differ from its caller's) - the mode
 * in which glibc's secure_getenv returns NULL (tests/secure_env). */
#include <stdio.h>
#include <sys/auxv.h>

#include <sefer.h>

int main(void)
{
    char value[64];
    if (sefer_config_get("guard.level", value, sizeof value) != 0)
        return 2;
    printf("%s %s secure=%lu\n", value, sefer_config_source("guard.level"), getauxval(AT_SECURE));
    return 0;
}
