/*
 * The test guest's 32-bit process, /bin/leechio-32bit in the initramfs that
 * scripts/guest.sh builds (i386, static, no libraries: `as --32` and
 * `ld -m elf_i386`, which every x86-64 binutils has). It only sleeps, in
 * pause(2) through the i386 system call gate, for ever: what the tests
 * want of it is that it runs 32-bit code (the kernel marks its mm so, and
 * its executable is an ELF32 file).
 */
    .globl _start
    .text
_start:
    movl $29, %eax          /* __NR_pause on i386 */
    int $0x80
    jmp _start
