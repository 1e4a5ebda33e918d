package kpurgatory.kafka;

import org.objectweb.asm.ClassReader;
import org.objectweb.asm.ClassVisitor;
import org.objectweb.asm.ClassWriter;
import org.objectweb.asm.Label;
import org.objectweb.asm.MethodVisitor;
import org.objectweb.asm.Opcodes;
import org.objectweb.asm.Type;

import java.lang.instrument.ClassFileTransformer;
import java.lang.instrument.Instrumentation;
import java.security.ProtectionDomain;
import java.util.ArrayList;
import java.util.List;

/**
 * A Java agent that makes the monitors of Kafka's purgatory points of the controlled scheduler ({@link Turns}). Before
 * 0.11.0.2 the op lock is the op's monitor, and before 0.10.1.1 each watch list is guarded by one too: a
 * {@code synchronized} no reflection can replace. As each class of the purgatory ({@code kafka.server.DelayedOperation}
 * and its purgatory, watchers and closures) loads, the agent rewrites it with ASM:
 * <ul>
 * <li>each {@code monitorenter} calls {@link Turns#enter} with the monitor first (a point; the call returns once no
 * other scheduled thread holds it, so the JVM's own acquire never blocks), each {@code monitorexit} calls
 * {@link Turns#exited} after;
 * <li>a {@code synchronized} method (Scala compiles {@code def f = synchronized {…}} to one) is renamed, its flag
 * kept, and called from a method of the old name that calls {@link Turns#enter} before and {@link Turns#exited} after,
 * however it ends.
 * </ul>
 * Scala's lazy vals ({@code …$lzycompute}) keep their monitors: they guard a logger's first use, not the purgatory.
 * Outside a scheduled request both calls return at once.
 */
public final class MonitorAgent {
    private MonitorAgent() {
    }

    private static final String TURNS = Type.getInternalName(Turns.class);
    private static final String HOOK = "(Ljava/lang/Object;)V";
    /** The suffix of a synchronized method's own body, renamed. */
    static final String RENAMED = "$unscheduled";

    public static void premain(String options, Instrumentation instrumentation) {
        instrumentation.addTransformer(new ClassFileTransformer() {
            @Override
            public byte[] transform(ClassLoader loader, String name, Class<?> redefined, ProtectionDomain domain,
                                    byte[] bytes) {
                if (name == null || !name.startsWith("kafka/server/DelayedOperation")) return null;
                try {
                    return rewrite(bytes);
                } catch (RuntimeException e) {
                    System.err.println("MonitorAgent: cannot rewrite " + name + " (its monitors are no points): " + e);
                    return null;
                }
            }
        });
        Turns.monitorsControlled = true;
    }

    static byte[] rewrite(byte[] bytes) {
        ClassReader reader = new ClassReader(bytes);
        ClassWriter writer = new ClassWriter(reader, ClassWriter.COMPUTE_MAXS);
        reader.accept(new Rewriter(writer), 0);
        return writer.toByteArray();
    }

    private record Wrapped(int access, String name, String descriptor, String signature, String[] exceptions) {
    }

    private static final class Rewriter extends ClassVisitor {
        private String owner;
        private int version;
        private final List<Wrapped> wrapped = new ArrayList<>();

        Rewriter(ClassVisitor next) {
            super(Opcodes.ASM9, next);
        }

        @Override
        public void visit(int version, int access, String name, String signature, String superName,
                          String[] interfaces) {
            owner = name;
            this.version = version & 0xFFFF;
            super.visit(version, access, name, signature, superName, interfaces);
        }

        @Override
        public MethodVisitor visitMethod(int access, String name, String descriptor, String signature,
                                         String[] exceptions) {
            if (name.endsWith("$lzycompute")) return super.visitMethod(access, name, descriptor, signature, exceptions);
            boolean wrap = (access & Opcodes.ACC_SYNCHRONIZED) != 0 && (access & Opcodes.ACC_STATIC) == 0;
            if (wrap) {
                wrapped.add(new Wrapped(access, name, descriptor, signature, exceptions));
                int hidden = access & ~(Opcodes.ACC_PUBLIC | Opcodes.ACC_PROTECTED) | Opcodes.ACC_PRIVATE;
                return monitors(super.visitMethod(hidden, name + RENAMED, descriptor, signature, exceptions));
            }
            return monitors(super.visitMethod(access, name, descriptor, signature, exceptions));
        }

        private static MethodVisitor monitors(MethodVisitor next) {
            return new MethodVisitor(Opcodes.ASM9, next) {
                @Override
                public void visitInsn(int opcode) {
                    if (opcode == Opcodes.MONITORENTER) {
                        super.visitInsn(Opcodes.DUP);
                        super.visitMethodInsn(Opcodes.INVOKESTATIC, TURNS, "enter", HOOK, false);
                        super.visitInsn(opcode);
                    } else if (opcode == Opcodes.MONITOREXIT) {
                        super.visitInsn(Opcodes.DUP);
                        super.visitInsn(opcode);
                        super.visitMethodInsn(Opcodes.INVOKESTATIC, TURNS, "exited", HOOK, false);
                    } else {
                        super.visitInsn(opcode);
                    }
                }
            };
        }

        @Override
        public void visitEnd() {
            for (Wrapped method : wrapped) wrapper(method);
            super.visitEnd();
        }

        /** {@code enter(this); try { return name$unscheduled(args); } finally { exited(this); }} */
        private void wrapper(Wrapped method) {
            MethodVisitor code = super.visitMethod(method.access & ~Opcodes.ACC_SYNCHRONIZED, method.name,
                method.descriptor, method.signature, method.exceptions);
            Type type = Type.getMethodType(method.descriptor);
            Label start = new Label(), end = new Label(), thrown = new Label();
            code.visitCode();
            code.visitTryCatchBlock(start, end, thrown, null);
            code.visitVarInsn(Opcodes.ALOAD, 0);
            code.visitMethodInsn(Opcodes.INVOKESTATIC, TURNS, "enter", HOOK, false);
            code.visitLabel(start);
            code.visitVarInsn(Opcodes.ALOAD, 0);
            int slot = 1;
            for (Type argument : type.getArgumentTypes()) {
                code.visitVarInsn(argument.getOpcode(Opcodes.ILOAD), slot);
                slot += argument.getSize();
            }
            code.visitMethodInsn(Opcodes.INVOKESPECIAL, owner, method.name + RENAMED, method.descriptor, false);
            code.visitLabel(end);
            code.visitVarInsn(Opcodes.ALOAD, 0);
            code.visitMethodInsn(Opcodes.INVOKESTATIC, TURNS, "exited", HOOK, false);
            code.visitInsn(type.getReturnType().getOpcode(Opcodes.IRETURN));
            code.visitLabel(thrown);
            if (version >= Opcodes.V1_6)  // older class files have no frames
                code.visitFrame(Opcodes.F_FULL, locals(type).length, locals(type), 1,
                    new Object[] {"java/lang/Throwable"});
            code.visitVarInsn(Opcodes.ALOAD, 0);
            code.visitMethodInsn(Opcodes.INVOKESTATIC, TURNS, "exited", HOOK, false);
            code.visitInsn(Opcodes.ATHROW);
            code.visitMaxs(0, 0);
            code.visitEnd();
        }

        /** The frame's locals at the handler: this and the arguments, as the verifier types them. */
        private Object[] locals(Type method) {
            List<Object> locals = new ArrayList<>(List.of(owner));
            for (Type argument : method.getArgumentTypes()) {
                locals.add(switch (argument.getSort()) {
                    case Type.BOOLEAN, Type.BYTE, Type.CHAR, Type.SHORT, Type.INT -> Opcodes.INTEGER;
                    case Type.FLOAT -> Opcodes.FLOAT;
                    case Type.LONG -> Opcodes.LONG;
                    case Type.DOUBLE -> Opcodes.DOUBLE;
                    default -> argument.getInternalName();
                });
            }
            return locals.toArray();
        }
    }
}
