/*
 * unihost's KVM probe guest (src/machines/qemu/accel.ts): loaded by QEMU's
 * Multiboot loader at 1 MiB (the a.out kludge header comes first, 32 bytes,
 * made in accel.ts), entered here in 32-bit protected mode. It does what a
 * Unikraft kernel does first: long mode (identity-mapped 2 MiB page, PAE,
 * EFER.LME, paging), then the FPU and SSE (CR0.MP|NE, fninit, CR4.OSFXSR|
 * OSXMMEXCPT, ldmxcsr through a 32-bit address), and only then writes its
 * byte to isa-debug-exit. A /dev/kvm that cannot run these (a paravirtual
 * kvm_pvm: "INTERNAL_ERROR in batch emul" at Unikraft's ldmxcsr) fails it.
 *
 *   as --64 -o p.o probe-kernel.S && ld -m elf_x86_64 -Ttext=0x100020 --oformat binary -o p.bin p.o
 */
	.text
	.code32
	.globl _start
_start:
	cli
	/* page tables at 1 MiB + 4, 8, 12 KiB (past the file): PML4 -> PDPT -> PD, one 2 MiB page at 0 */
	mov $0x101000, %edi
	xor %eax, %eax
	mov $3072, %ecx
	rep stosl
	movl $0x102003, 0x101000
	movl $0x103003, 0x102000
	movl $0x000083, 0x103000
	mov $0x101000, %eax
	mov %eax, %cr3
	mov %cr4, %eax
	or $0x20, %eax			/* PAE */
	mov %eax, %cr4
	mov $0xc0000080, %ecx		/* EFER */
	rdmsr
	or $0x100, %eax			/* LME */
	wrmsr
	mov %cr0, %eax
	or $0x80000001, %eax		/* PG, PE */
	mov %eax, %cr0
	lgdt gdtr
	ljmp $0x08, $long_mode

	.code64
long_mode:
	mov %cr0, %rdi
	or $0x22, %edi			/* MP, NE */
	mov %rdi, %cr0
	fninit
	mov %cr4, %rdi
	or $0x600, %edi			/* OSFXSR, OSXMMEXCPT */
	mov %rdi, %cr4
	mov $mxcsr, %ebx
	addr32 ldmxcsr (%ebx)
	mov $0x31, %al			/* the probe's byte: QEMU exits with (0x31 << 1) | 1 */
	mov $0x501, %dx
	out %al, %dx
	cli
1:	hlt
	jmp 1b

	.balign 8
gdt:
	.quad 0
	.quad 0x00af9a000000ffff	/* 64-bit code */
gdtr:
	.word gdtr - gdt - 1
	.long gdt
mxcsr:
	.long 0x1f80
