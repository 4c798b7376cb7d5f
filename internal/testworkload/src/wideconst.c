// Enumerators whose value needs a 10-byte SLEB128. GCC, with DWARF 5,
// shares one abbreviation among them and writes the value once as
// DW_FORM_implicit_const in .debug_abbrev, as in CPython 3.12's libpython.
enum wide1 { WIDE1 = -9223372036854775807LL };
enum wide2 { WIDE2 = -9223372036854775807LL };
enum wide3 { WIDE3 = -9223372036854775807LL };

enum wide1 w1;
enum wide2 w2;
enum wide3 w3;

int main(void)
{
	return (int)(w1 + w2 + w3);
}
