package kpurgatory.kafka;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The protocol's JSON, and no more: objects become {@code Map<String, Object>}, arrays {@code List<Object>}, integers
 * {@code Long} (the protocol's integers are 64-bit), and strings, booleans and null themselves. Kafka's classpath has
 * no JSON library every build is sure to carry, and a line of the protocol is small, so a hand-written reader keeps
 * the adapter free of dependencies.
 */
final class Json {
    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    static Object parse(String text) {
        Json reader = new Json(text);
        Object value = reader.value();
        reader.skipSpace();
        if (reader.at != text.length()) throw reader.error("text after the value");
        return value;
    }

    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    // --- reading ----------------------------------------------------------------------------------------------

    private Object value() {
        skipSpace();
        if (at >= text.length()) throw error("a value");
        char c = text.charAt(at);
        switch (c) {
            case '{': return object();
            case '[': return array();
            case '"': return string();
            case 't': return literal("true", Boolean.TRUE);
            case 'f': return literal("false", Boolean.FALSE);
            case 'n': return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) return integer();
                throw error("a value");
        }
    }

    private Map<String, Object> object() {
        Map<String, Object> object = new LinkedHashMap<>();
        at++;
        skipSpace();
        if (peek('}')) return object;
        do {
            skipSpace();
            if (at >= text.length() || text.charAt(at) != '"') throw error("a member name");
            String name = string();
            skipSpace();
            expect(':');
            object.put(name, value());
            skipSpace();
        } while (peek(','));
        expect('}');
        return object;
    }

    private List<Object> array() {
        List<Object> array = new ArrayList<>();
        at++;
        skipSpace();
        if (peek(']')) return array;
        do {
            array.add(value());
            skipSpace();
        } while (peek(','));
        expect(']');
        return array;
    }

    private String string() {
        StringBuilder out = new StringBuilder();
        at++;
        while (true) {
            if (at >= text.length()) throw error("the end of a string");
            char c = text.charAt(at++);
            if (c == '"') return out.toString();
            if (c < 0x20) throw error("no control character in a string");
            if (c != '\\') {
                out.append(c);
                continue;
            }
            if (at >= text.length()) throw error("an escape");
            char escape = text.charAt(at++);
            switch (escape) {
                case '"': case '\\': case '/': out.append(escape); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (at + 4 > text.length()) throw error("four hex digits");
                    try {
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                    } catch (NumberFormatException e) {
                        throw error("four hex digits");
                    }
                    at += 4;
                    break;
                default: throw error("a valid escape");
            }
        }
    }

    private Long integer() {
        int start = at;
        if (text.charAt(at) == '-') at++;
        while (at < text.length() && Character.isDigit(text.charAt(at))) at++;
        if (at < text.length() && ".eE".indexOf(text.charAt(at)) >= 0)
            throw error("an integer (no fraction or exponent)");
        try {
            return Long.parseLong(text.substring(start, at));
        } catch (NumberFormatException e) {
            at = start;
            throw error("a 64-bit integer");
        }
    }

    private Object literal(String word, Object value) {
        if (!text.startsWith(word, at)) throw error(word);
        at += word.length();
        return value;
    }

    private void skipSpace() {
        while (at < text.length() && " \t\r\n".indexOf(text.charAt(at)) >= 0) at++;
    }

    private boolean peek(char c) {
        if (at < text.length() && text.charAt(at) == c) {
            at++;
            return true;
        }
        return false;
    }

    private void expect(char c) {
        if (!peek(c)) throw error("'" + c + "'");
    }

    private IllegalArgumentException error(String expected) {
        return new IllegalArgumentException("not JSON: expected " + expected + " at character " + at);
    }

    // --- writing ----------------------------------------------------------------------------------------------

    private static void write(Object value, StringBuilder out) {
        if (value == null || value instanceof Boolean || value instanceof Long || value instanceof Integer) {
            out.append(value);
        } else if (value instanceof String) {
            writeString((String) value, out);
        } else if (value instanceof Map) {
            out.append('{');
            String separator = "";
            for (Map.Entry<?, ?> member : ((Map<?, ?>) value).entrySet()) {
                out.append(separator);
                writeString((String) member.getKey(), out);
                out.append(':');
                write(member.getValue(), out);
                separator = ",";
            }
            out.append('}');
        } else if (value instanceof List) {
            out.append('[');
            String separator = "";
            for (Object item : (List<?>) value) {
                out.append(separator);
                write(item, out);
                separator = ",";
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("cannot write " + value.getClass().getName() + " as JSON");
        }
    }

    private static void writeString(String s, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') out.append('\\').append(c);
            else if (c < 0x20) out.append(String.format("\\u%04x", (int) c));
            else out.append(c);
        }
        out.append('"');
    }
}
